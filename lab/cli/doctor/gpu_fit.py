"""What the trainer image's CUDA build asks of a GPU node: the driver series and the GPU generations.

The image's torch wheels carry CUDA 13.0 (`cuda-toolkit` in images/trainer/requirements.txt).
CUDA 13.0 needs an NVIDIA driver of the 580 series or newer (CUDA 13.0 release notes,
docs.nvidia.com/cuda/archive/13.0.0/cuda-toolkit-release-notes, driver compatibility), and the
wheels hold kernels for compute capability 7.5 (Turing) to 12.0 (Blackwell): CUDA 13 builds
nothing for Maxwell, Pascal or Volta. The device plugin advertises any GPU the driver lists, so
without these checks an unfit node shows up only when the first rank fails, after the image
build. The nvidia role and `labctl doctor` hold nodes to the same figures.
"""

from __future__ import annotations

from lab.config.facts import IMAGE_CUDA, MAX_COMPUTE_CAPABILITY, MIN_COMPUTE_CAPABILITY, MIN_DRIVER_MAJOR


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.strip().split("."))


def gpu_problems(driver: str, capabilities: list[str]) -> list[str]:
    """Why the node's driver (nvidia-smi's driver_version) or GPUs (compute_cap) cannot run the image."""
    problems = []
    try:
        major = _version(driver)[0]
    except ValueError:
        return [f"nvidia-smi reports no readable driver version ({driver!r})"]
    if major < MIN_DRIVER_MAJOR:
        problems.append(
            f"driver {driver.strip()} is older than the {MIN_DRIVER_MAJOR} series"
            f" that CUDA {IMAGE_CUDA} needs"
        )
    low, high = _version(MIN_COMPUTE_CAPABILITY), _version(MAX_COMPUTE_CAPABILITY)
    for capability in capabilities:
        try:
            fits = low <= _version(capability) <= high
        except ValueError:
            fits = False
        if not fits:
            problems.append(
                f"a GPU of compute capability {capability.strip()} is outside {MIN_COMPUTE_CAPABILITY}"
                f" to {MAX_COMPUTE_CAPABILITY}, the range the image's CUDA {IMAGE_CUDA} wheels hold"
            )
    return problems
