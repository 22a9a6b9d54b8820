"""Shared memory and locked memory as reported: a container's /dev/shm, a pod's, a host's memlock limit."""

from __future__ import annotations

import healthy
from cases import Machine, case


def _docker_shm(size: str) -> healthy.Spec:
    """pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime under the NVIDIA runtime, its /dev/shm at ``size``."""
    spec = healthy.docker_pytorch_nvidia_runtime()
    spec["proc/mounts"] = spec["proc/mounts"].replace("size=16777216k", f"size={size}")
    return spec


def _shm_case(case_id: str) -> None:
    @case(case_id)
    def build(broken: bool) -> Machine:
        """`docker run --gpus all` without --shm-size (64 MiB) vs the twin started with --shm-size=16g."""
        return Machine(_docker_shm("65536k" if broken else "16777216k"))


for _id in ("simplerecon-3-dataloader-bus-error-docker-shm", "mosaicml-streaming-493-bus-error-docker-shm",
            "mdtvsfa-10-docker-default-shm-64m"):
    _shm_case(_id)


def _pod_shm(broken: bool) -> Machine:
    """A Kubernetes pod with two of the node's GPUs: the runtime's 64 MiB /dev/shm, or (the twin) a memory-backed
    emptyDir mounted over it."""
    from cases import paired

    spec = healthy.k8s_pod_two_gpus()
    if broken:
        spec["proc/mounts"] = spec["proc/mounts"].replace("tmpfs /dev/shm tmpfs rw,relatime,size=268435456k",
                                                          "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k")
    return paired("k8s_pod_two_gpus", spec)


@case("nccl-525-kubeflow-pod-shm-64m")
def nccl_525(broken: bool) -> Machine:
    """Kubeflow job on a 4x T4 node: NCCL's shared-memory transport cannot fallocate in the pod's 64 MiB /dev/shm."""
    return _pod_shm(broken)


@case("pytorch-ci-infra-490-runner-pod-shm")
def ci_infra_490(broken: bool) -> Machine:
    """PyTorch's CI runner pods (4x T4) ran NCCL tests in the container runtime's default /dev/shm."""
    return _pod_shm(broken)


@case("nccl-1683-container-shm-rtx5090")
def nccl_1683(broken: bool) -> Machine:
    """A 4x RTX 5090 box: the job's container had the default /dev/shm; NCCL failed to create its segment."""
    return Machine(_docker_shm("65536k" if broken else "16777216k"))
