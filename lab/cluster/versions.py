"""Every container image the cluster runs that is not built here, pinned in one place."""

from __future__ import annotations

# CNCF Distribution, the reference registry; 3.0 is the maintained line.
REGISTRY_IMAGE = "docker.io/library/registry:3.0.0"

# Rootless BuildKit: builds from a Dockerfile in an unprivileged pod, no Docker daemon anywhere.
BUILDKIT_IMAGE = "docker.io/moby/buildkit:v0.23.2-rootless"

# NVIDIA's device plugin as a static DaemonSet (no GPU operator, no Helm).
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"

# Kueue, the gang scheduler, from its official OCI Helm chart
# (https://kueue.sigs.k8s.io/docs/installation/#install-by-helm).
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.18.3"
