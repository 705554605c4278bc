"""Replica environments: identity, rendezvous addresses, TF_CONFIG and user overrides."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mlyard.runtime.rendezvous import JobContext, ReplicaSlot, replica_environments
from mlyard.spec import JobSpec

CONTEXT = JobContext(
    job_id=42,
    attempt=3,
    api_url="http://127.0.0.1:8600",
    token="secret-token",
    checkpoint_directory="/var/lib/mlyard/checkpoints/42",
    master_port=29500,
)


def make_spec(**fields: Any) -> JobSpec:
    fields.setdefault("name", "train")
    fields.setdefault("command", "python train.py")
    return JobSpec.model_validate(fields)


def slot(role: str, index: int, rank: int, *, node: str = "node-a", address: str = "10.0.0.1",
         port: int = 40000, cpu_count: int = 1, gpu_ids: tuple[int, ...] = (), processes: int = 1) -> ReplicaSlot:
    return ReplicaSlot(role=role, index=index, rank=rank, node=node, address=address, port=port,
                       cpu_count=cpu_count, gpu_ids=gpu_ids, processes=processes)


def one_node_pytorch_pair() -> list[dict[str, str]]:
    spec = make_spec(framework="pytorch", roles=[{"name": "worker", "replicas": 2, "resources": {"cpu": 3}}])
    slots = [
        slot("worker", 0, 0, port=40001, cpu_count=3, gpu_ids=(0, 1)),
        slot("worker", 1, 1, port=40002, cpu_count=3),
    ]
    return replica_environments(spec, slots, CONTEXT)


def test_replicas_on_one_machine_are_still_nodes_of_their_own() -> None:
    first, second = one_node_pytorch_pair()
    assert (first["RANK"], second["RANK"]) == ("0", "1")
    assert first["WORLD_SIZE"] == second["WORLD_SIZE"] == "2"
    assert first["MASTER_ADDR"] == second["MASTER_ADDR"] == "10.0.0.1"
    assert first["MASTER_PORT"] == second["MASTER_PORT"] == "29500"
    # Lightning reads NODE_RANK (else GROUP_RANK) and LOCAL_RANK: the second replica is node 1,
    # not the second device of node 0.
    assert (first["LOCAL_RANK"], second["LOCAL_RANK"]) == ("0", "0")
    assert first["LOCAL_WORLD_SIZE"] == second["LOCAL_WORLD_SIZE"] == "1"
    assert (first["NODE_RANK"], second["NODE_RANK"]) == ("0", "1")
    assert (first["GROUP_RANK"], second["GROUP_RANK"]) == ("0", "1")
    assert (first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]) == ("0,1", "")


def test_torchrun_finds_the_jobs_topology_in_its_pet_variables() -> None:
    spec = make_spec(framework="pytorch", roles=[{"name": "worker", "replicas": 2, "processes": 4}])
    slots = [slot("worker", 0, 0, processes=4, cpu_count=8), slot("worker", 1, 1, processes=4, cpu_count=8)]
    first, second = replica_environments(spec, slots, CONTEXT)
    for environment, node_rank in ((first, "0"), (second, "1")):
        assert environment["PET_NNODES"] == "2"
        assert environment["PET_NODE_RANK"] == node_rank
        assert environment["PET_NPROC_PER_NODE"] == "4"
        assert (environment["PET_MASTER_ADDR"], environment["PET_MASTER_PORT"]) == ("10.0.0.1", "29500")
        assert environment["PET_RDZV_ENDPOINT"] == "10.0.0.1:29500"
        assert "TORCHELASTIC_RUN_ID" not in environment, "only torchrun itself says it is the launcher"
    assert first["WORLD_SIZE"] == "8" and first["LOCAL_WORLD_SIZE"] == "4"
    assert (first["RANK"], second["RANK"]) == ("0", "4"), "a replica's variables describe its first process"
    assert first["OMP_NUM_THREADS"] == "2", "the replica's cores shared among its processes"


def test_first_ranks_add_up_the_processes_of_lower_replicas() -> None:
    spec = make_spec(roles=[{"name": "chief", "processes": 2}, {"name": "worker", "replicas": 2, "processes": 3}])
    slots = [slot("chief", 0, 0, processes=2), slot("worker", 0, 1, processes=3), slot("worker", 1, 2, processes=3)]
    environments = replica_environments(spec, slots, CONTEXT)
    assert [e["RANK"] for e in environments] == ["0", "2", "5"]
    assert {e["WORLD_SIZE"] for e in environments} == {"8"}


def test_omp_threads_follow_the_replica_cpu_count() -> None:
    first, second = one_node_pytorch_pair()
    assert first["OMP_NUM_THREADS"] == second["OMP_NUM_THREADS"] == "3"


def test_omp_threads_are_at_least_one() -> None:
    [environment] = replica_environments(make_spec(), [slot("worker", 0, 0, cpu_count=0)], CONTEXT)
    assert environment["OMP_NUM_THREADS"] == "1"


def test_cuda_visible_devices_lists_the_gpu_ids_and_is_empty_without_gpus() -> None:
    first, second = one_node_pytorch_pair()
    assert first["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert second["CUDA_VISIBLE_DEVICES"] == ""


def test_mlyard_variables_identify_the_job_attempt_and_replica() -> None:
    first, second = one_node_pytorch_pair()
    for environment, replica in ((first, "worker-0"), (second, "worker-1")):
        assert environment["MLYARD_JOB_ID"] == "42"
        assert environment["MLYARD_ATTEMPT"] == "3"
        assert environment["MLYARD_REPLICA"] == replica
        assert environment["MLYARD_ROLE"] == "worker"
        assert environment["MLYARD_API"] == "http://127.0.0.1:8600"
        assert environment["MLYARD_TOKEN"] == "secret-token"
        assert environment["MLYARD_CHECKPOINT_DIR"] == "/var/lib/mlyard/checkpoints/42"
        assert environment["PYTHONUNBUFFERED"] == "1"


def test_every_value_is_a_string() -> None:
    for environment in one_node_pytorch_pair():
        assert all(isinstance(key, str) and isinstance(value, str) for key, value in environment.items())


def test_no_tf_config_for_pytorch() -> None:
    for environment in one_node_pytorch_pair():
        assert "TF_CONFIG" not in environment


def test_no_tf_config_without_a_framework() -> None:
    [environment] = replica_environments(make_spec(), [slot("worker", 0, 0)], CONTEXT)
    assert "TF_CONFIG" not in environment


def test_replicas_on_two_nodes_are_each_local_rank_zero_and_meet_at_rank_zeros_node() -> None:
    spec = make_spec(framework="pytorch", roles=[{"name": "worker", "replicas": 2}])
    slots = [
        slot("worker", 0, 0, node="node-b", address="10.0.0.2"),
        slot("worker", 1, 1, node="node-a", address="10.0.0.1"),
    ]
    first, second = replica_environments(spec, slots, CONTEXT)
    assert first["LOCAL_RANK"] == second["LOCAL_RANK"] == "0"
    assert first["LOCAL_WORLD_SIZE"] == second["LOCAL_WORLD_SIZE"] == "1"
    assert first["MASTER_ADDR"] == second["MASTER_ADDR"] == "10.0.0.2"
    assert first["WORLD_SIZE"] == second["WORLD_SIZE"] == "2"
    # Node ranks are replica ranks, whichever machines the replicas landed on.
    assert (first["GROUP_RANK"], second["GROUP_RANK"]) == ("0", "1")


def tensorflow_job() -> tuple[list[ReplicaSlot], list[dict[str, str]]]:
    spec = make_spec(
        framework="tensorflow",
        roles=[{"name": "chief"}, {"name": "worker", "replicas": 2}, {"name": "ps"}],
    )
    slots = [
        slot("chief", 0, 0, node="node-a", address="10.0.0.1", port=5000),
        slot("worker", 0, 1, node="node-a", address="10.0.0.1", port=5001),
        slot("worker", 1, 2, node="node-b", address="10.0.0.2", port=5002),
        slot("ps", 0, 3, node="node-b", address="10.0.0.2", port=5003),
    ]
    return slots, replica_environments(spec, slots, CONTEXT)


def test_tensorflow_config_lists_every_role_address() -> None:
    _, environments = tensorflow_job()
    expected_cluster = {
        "chief": ["10.0.0.1:5000"],
        "worker": ["10.0.0.1:5001", "10.0.0.2:5002"],
        "ps": ["10.0.0.2:5003"],
    }
    for environment in environments:
        assert json.loads(environment["TF_CONFIG"])["cluster"] == expected_cluster


def test_tensorflow_config_names_each_replicas_own_task() -> None:
    slots, environments = tensorflow_job()
    tasks = [json.loads(environment["TF_CONFIG"])["task"] for environment in environments]
    assert tasks == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
        {"type": "ps", "index": 0},
    ]
    assert [environment["MLYARD_REPLICA"] for environment in environments] == [
        f"{s.role}-{s.index}" for s in slots
    ]


def test_tensorflow_worker_addresses_are_ordered_by_index_not_slot_order() -> None:
    spec = make_spec(framework="tensorflow", roles=[{"name": "worker", "replicas": 2}])
    slots = [
        slot("worker", 1, 0, address="10.0.0.9", port=6001),
        slot("worker", 0, 1, address="10.0.0.8", port=6000),
    ]
    environments = replica_environments(spec, slots, CONTEXT)
    cluster = json.loads(environments[0]["TF_CONFIG"])["cluster"]
    assert cluster == {"worker": ["10.0.0.8:6000", "10.0.0.9:6001"]}
    assert json.loads(environments[0]["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_tensorflow_evaluator_is_not_part_of_the_cluster() -> None:
    spec = make_spec(framework="tensorflow", roles=[{"name": "worker"}, {"name": "evaluator"}])
    slots = [slot("worker", 0, 0, port=7000), slot("evaluator", 0, 1, port=7001)]
    worker, evaluator = replica_environments(spec, slots, CONTEXT)
    assert json.loads(worker["TF_CONFIG"])["cluster"] == {"worker": ["10.0.0.1:7000"]}
    assert json.loads(evaluator["TF_CONFIG"])["task"] == {"type": "evaluator", "index": 0}


def test_spec_and_role_env_are_applied_with_role_env_winning() -> None:
    spec = make_spec(
        env={"LEARNING_RATE": "0.1", "SHARED": "from-job"},
        roles=[{"name": "chief", "env": {"SHARED": "from-chief"}}, {"name": "worker"}],
    )
    chief, worker = replica_environments(spec, [slot("chief", 0, 0), slot("worker", 0, 1)], CONTEXT)
    assert chief["LEARNING_RATE"] == worker["LEARNING_RATE"] == "0.1"
    assert chief["SHARED"] == "from-chief"
    assert worker["SHARED"] == "from-job"


def test_user_env_may_override_computed_defaults() -> None:
    spec = make_spec(env={"OMP_NUM_THREADS": "7", "PYTHONUNBUFFERED": "0"})
    [environment] = replica_environments(spec, [slot("worker", 0, 0, cpu_count=2)], CONTEXT)
    assert environment["OMP_NUM_THREADS"] == "7"
    assert environment["PYTHONUNBUFFERED"] == "0"


def test_user_env_cannot_override_identity_variables() -> None:
    owned = {
        "RANK": "99",
        "WORLD_SIZE": "99",
        "MLYARD_JOB_ID": "99",
        "MLYARD_TOKEN": "forged",
        "MASTER_ADDR": "evil.example",
        "LOCAL_RANK": "99",
    }
    spec = make_spec(env=owned, roles=[{"name": "worker", "replicas": 2, "env": owned}])
    environments = replica_environments(spec, [slot("worker", 0, 0), slot("worker", 1, 1)], CONTEXT)
    assert [e["RANK"] for e in environments] == ["0", "1"]
    assert [e["LOCAL_RANK"] for e in environments] == ["0", "0"]
    for environment in environments:
        assert environment["WORLD_SIZE"] == "2"
        assert environment["MLYARD_JOB_ID"] == "42"
        assert environment["MLYARD_TOKEN"] == "secret-token"
        assert environment["MASTER_ADDR"] == "10.0.0.1"


def test_environments_are_independent_dicts() -> None:
    first, second = one_node_pytorch_pair()
    first["EXTRA"] = "1"
    assert "EXTRA" not in second


def test_every_replica_gets_the_jobs_tensorboard_directory_when_one_is_offered() -> None:
    assert all("MLYARD_TENSORBOARD_DIR" not in environment for environment in one_node_pytorch_pair())
    spec = make_spec(roles=[{"name": "worker", "replicas": 2}], env={"MLYARD_TENSORBOARD_DIR": "/tmp/mine"})
    context = dataclasses.replace(CONTEXT, tensorboard_directory="/var/lib/mlyard/tensorboard/42")
    environments = replica_environments(spec, [slot("worker", 0, 0), slot("worker", 1, 1)], context)
    assert [environment["MLYARD_TENSORBOARD_DIR"] for environment in environments] == [
        "/var/lib/mlyard/tensorboard/42"] * 2


def test_one_process_per_gpu_sees_all_of_its_replicas_gpus() -> None:
    spec = make_spec(framework="pytorch", roles=[{"name": "worker", "replicas": 2, "processes": 8,
                                                  "resources": {"cpu": 16, "gpu": 8}}])
    slots = [slot("worker", 0, 0, cpu_count=16, gpu_ids=tuple(range(8)), processes=8),
             slot("worker", 1, 1, cpu_count=16, gpu_ids=tuple(range(8, 16)), processes=8)]
    first, second = replica_environments(spec, slots, CONTEXT)
    assert first["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert second["CUDA_VISIBLE_DEVICES"] == "8,9,10,11,12,13,14,15"
    assert (first["LOCAL_WORLD_SIZE"], first["PET_NPROC_PER_NODE"], first["WORLD_SIZE"]) == ("8", "8", "16")
    assert (second["RANK"], second["OMP_NUM_THREADS"]) == ("8", "2")
