"""Every container image the cluster runs that is not built here, pinned in one place, by digest.

A tag can be moved to other content by whoever controls the repository; a digest names the
content itself. The tag stays for people to read; the runtime pulls by the digest (a reference
with both resolves by the digest). Each digest is the multi-platform index of that tag as
published. Each digest is taken only where two published records of it agree, described beside it,
so one mistyped or tampered page cannot move what the nodes run.
"""

from __future__ import annotations

# CNCF Distribution, the reference registry. Digest: the one unrelated projects agree on for
# `registry:3.0.0` (CI scripts that start it for Helm OCI pushes and for image-inspection tests).
REGISTRY_IMAGE = (
    "docker.io/library/registry:3.0.0@sha256:6c5666b861f3505b116bb9aa9b25175e71210414bd010d92035ff64018f9457e"
)

# Rootless BuildKit: builds from a Dockerfile in an unprivileged pod, no Docker daemon anywhere.
# Digest: the v0.23.2-rootless index on Docker Hub, as a Renovate-maintained build file records it
# for the tags `v0.23.2-rootless` and `buildx-stable-1-rootless` alike, and as other projects pin it.
BUILDKIT_IMAGE = (
    "docker.io/moby/buildkit:v0.23.2-rootless"
    "@sha256:cab936745de5d673465948f1e93ff4d6e372bbe33f218afd3314eba45a6f85a9"
)

# NVIDIA's device plugin as a static DaemonSet (no GPU operator, no Helm). Digest: NVIDIA's own
# GPU Operator v25.3.0, which ships device plugin v0.17.1, pins this image by it
# (github.com/NVIDIA/gpu-operator, bundle/v25.3.0/manifests/gpu-operator-certified.clusterserviceversion.yaml,
# DEVICE_PLUGIN_IMAGE), and other projects pin `k8s-device-plugin:v0.17.1` by the same digest.
DEVICE_PLUGIN_IMAGE = (
    "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    "@sha256:af31e2b7c7f89834c4e5219860def7ac2e49a207b3d4e8610d5a26772b7738e5"
)
# Kueue, the gang scheduler, from its official OCI Helm chart
# (https://kueue.sigs.k8s.io/docs/installation/#install-by-helm).
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.18.3"

# The monitoring stack (lab.cluster.observability), each chart at a version its repository's
# own Chart.yaml declares: prometheus-community/helm-charts charts/prometheus/Chart.yaml
# (29.27.0, Prometheus v3.14.0) and charts/prometheus-node-exporter/Chart.yaml (4.56.1, node
# exporter 1.12.1), published at https://prometheus-community.github.io/helm-charts.
PROMETHEUS_COMMUNITY_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
PROMETHEUS_CHART = "prometheus"
PROMETHEUS_VERSION = "29.27.0"
NODE_EXPORTER_CHART = "prometheus-node-exporter"
NODE_EXPORTER_VERSION = "4.56.1"
# Grafana's chart moved from grafana/helm-charts to grafana-community/helm-charts in January 2026
# (grafana/helm-charts commit 3a90565, "migrate chart grafana"); charts/grafana/Chart.yaml there
# declares 12.11.1 (Grafana 13.2.0), published as an OCI artifact on ghcr.io (its README).
GRAFANA_CHART = "oci://ghcr.io/grafana-community/helm-charts/grafana"
GRAFANA_VERSION = "12.11.1"
# NVIDIA/dcgm-exporter deployment/Chart.yaml at tag 4.5.3-4.8.2 declares 4.8.2; its README names
# the chart repository.
DCGM_EXPORTER_REPOSITORY = "https://nvidia.github.io/dcgm-exporter/helm-charts"
DCGM_EXPORTER_CHART = "dcgm-exporter"
DCGM_EXPORTER_VERSION = "4.8.2"
