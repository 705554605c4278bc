"""A replica is one node of the job's world on every backend: the same attempt rendered by the
local backend (the launcher's `launch.json`) and by the Kubernetes backend (the pod's `env`)
gives every replica the same variables, side by side."""

from __future__ import annotations

from typing import Any

from k8s_support import Placement, attempt, backend

from mlyard.backends.local.processes import LocalBackend
from mlyard.spec import JobSpec

GIB = 1024**3
# Where a pod sees its machine differently: its GPUs are its own devices 0…n-1, and a pod
# without GPUs is told so for images that would show it every GPU.
POD_ONLY = {"NVIDIA_VISIBLE_DEVICES"}
RENUMBERED = {"CUDA_VISIBLE_DEVICES"}


def pod_variables(pod: dict[str, Any]) -> dict[str, str | None]:
    return {variable["name"]: variable.get("value") for variable in pod["spec"]["containers"][0]["env"]}


def both_renderings(spec: JobSpec, placements: list[Placement]) -> tuple[list[dict], list[dict]]:
    renderer = backend()
    launch = attempt(spec, placements, renderer=renderer)
    _service, _secret, *pods = renderer.dryrun(launch)
    local = LocalBackend(containers=None).dryrun(launch)
    return [plan["config"]["env"] for plan in local], [pod_variables(pod) for pod in pods]


def assert_same_variables(local: list[dict], pods: list[dict]) -> None:
    for local_env, pod_env in zip(local, pods, strict=True):
        assert set(local_env) == set(pod_env) - POD_ONLY
        for name, value in local_env.items():
            if name not in RENUMBERED and pod_env[name] is not None:  # None: passed by reference (the token)
                assert pod_env[name] == value, name


def test_two_ddp_replicas_of_two_processes_see_the_same_world_on_both_backends() -> None:
    spec = JobSpec.model_validate({"name": "ddp", "command": ["torchrun", "train.py"], "framework": "pytorch",
                                   "roles": [{"name": "worker", "replicas": 2, "processes": 2}]})
    # Both replicas on one machine: still two nodes of the world.
    local, pods = both_renderings(spec, [Placement("worker", 0, "node-a", 2, GIB), Placement("worker", 1, "node-a", 2, GIB)])
    assert_same_variables(local, pods)
    assert [env["NODE_RANK"] for env in pods] == ["0", "1"]
    assert [env["LOCAL_RANK"] for env in pods] == ["0", "0"]
    assert {env["PET_NPROC_PER_NODE"] for env in pods} == {"2"}
    assert {env["WORLD_SIZE"] for env in pods} == {"4"}
    assert pods[0]["MLYARD_TOKEN"] is None, "the pod reads its token from the attempt's Secret"


def test_a_tensorflow_parameter_server_job_sees_the_same_cluster_on_both_backends() -> None:
    spec = JobSpec.model_validate({"name": "ps", "command": ["python", "train.py"], "framework": "tensorflow",
                                   "roles": [{"name": "chief"}, {"name": "worker", "replicas": 2}, {"name": "ps"}]})
    placements = [Placement("chief", 0, "node-a", 1, GIB), Placement("worker", 0, "node-a", 1, GIB),
                  Placement("worker", 1, "node-b", 1, GIB), Placement("ps", 0, "node-b", 1, GIB, gpus=(3,))]
    local, pods = both_renderings(spec, placements)
    assert_same_variables(local, pods)
    assert (local[3]["CUDA_VISIBLE_DEVICES"], pods[3]["CUDA_VISIBLE_DEVICES"]) == ("3", "0")
