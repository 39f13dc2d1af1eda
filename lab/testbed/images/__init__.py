"""Container images for an offline kubeadm install on the test machines, built here, never pulled.

`build(tools_bin, debian_root, out)` writes one OCI image-layout archive per image into `out`,
each imported by name with `ctr -n k8s.io images import --all-platforms FILE` (containerd 1.6).
The names and the ClusterConfiguration tags they need are in lab.testbed.images.names; what each
image holds and why in lab.testbed.images.build; the archive format in lab.testbed.images.oci.
`python -m lab.testbed.images build OUT --debian-root DIR` does the same from a shell.
"""

from lab.testbed.images.build import Image, build
from lab.testbed.images.names import CLUSTER_CONFIGURATION_TAGS, PAUSE_IMAGE

__all__ = ["CLUSTER_CONFIGURATION_TAGS", "PAUSE_IMAGE", "Image", "build"]
