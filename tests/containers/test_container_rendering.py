"""What a replica's container may see and do, from its rendering alone (no engine needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mlyard.backends.base import AttemptLaunch, DatasetMount, ReplicaLaunch
from mlyard.backends.local.containers import (
    ContainerReplicas,
    Engine,
    EngineError,
    container_replicas,
)
from mlyard.backends.local.containers.engine import _timestamp, container_state
from mlyard.backends.local.containers.create_options import (
    CODE_MOUNT,
    ContainerIdentity,
    container_name,
)
from mlyard.backends.local.processes import LocalBackend
from mlyard.errors import MlyardError

IMAGE = "localhost/some-image:1"
# Nothing listens here: rendering must not need the engine.
NO_ENGINE = "unix:///nonexistent/engine.sock"


def replica(home: Path, name: str = "worker-0", *, rank: int = 0, command: tuple[str, ...] = ("python3", "train.py"),
            gpu_ids: tuple[int, ...] = (), image: str | None = IMAGE) -> ReplicaLaunch:
    return ReplicaLaunch(
        replica_id=rank + 1, name=name, rank=rank, node="here", cpu_ids=(2, 3), gpu_ids=gpu_ids,
        memory_bytes=3 * 1024**3, command=command,
        env={"RANK": str(rank), "MLYARD_CHECKPOINT_DIR": str(home / "checkpoints" / "7"),
             "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in gpu_ids)},
        directory=home / "runs" / "7" / "2" / name, snapshot=None, image=image,
    )


def attempt(home: Path, *replicas: ReplicaLaunch) -> AttemptLaunch:
    return AttemptLaunch(job_id=7, attempt=2, replicas=replicas, owner="alice",
                         private_directories=(home / "checkpoints" / "7", home / "tensorboard" / "7"))


def backend(runtime: str = "auto") -> LocalBackend:
    return LocalBackend(cpus=1, containers=container_replicas(runtime, NO_ENGINE))


def test_a_replica_mounts_only_its_code_read_only_and_its_jobs_own_directories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLYARD_DATABASE_URL", "postgresql://mlyard:canary@db/mlyard")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary")
    launch = attempt(tmp_path, replica(tmp_path))
    [plan] = backend().dryrun(launch)
    arguments = plan["container"]
    assert plan["runtime"] == "container"
    assert arguments["volumes"] == {
        str(tmp_path / "runs" / "7" / "2" / "worker-0" / "code"): {"bind": CODE_MOUNT, "mode": "ro"},
        str(tmp_path / "checkpoints" / "7"): {"bind": str(tmp_path / "checkpoints" / "7"), "mode": "rw"},
        str(tmp_path / "tensorboard" / "7"): {"bind": str(tmp_path / "tensorboard" / "7"), "mode": "rw"},
    }
    assert arguments["working_dir"] == CODE_MOUNT
    assert not {"mounts", "binds", "devices", "volumes_from"} & set(arguments)
    # The checkpoint directory means the same path inside as the variable says.
    assert arguments["environment"]["MLYARD_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints" / "7")
    # The job's variables and a HOME: nothing of the server's environment.
    assert set(arguments["environment"]) == {"RANK", "MLYARD_CHECKPOINT_DIR", "HOME"}


def test_a_replica_runs_unprivileged_as_nobody_without_capabilities(tmp_path: Path) -> None:
    [plan] = backend().dryrun(attempt(tmp_path, replica(tmp_path)))
    arguments = plan["container"]
    assert arguments["user"] == "65534:65534"
    assert arguments["privileged"] is False
    assert arguments["cap_drop"] == ["ALL"] and "cap_add" not in arguments
    assert arguments["security_opt"] == ["no-new-privileges"]
    assert arguments["environment"]["HOME"] == "/tmp"  # nobody has no home of its own


def test_a_replica_below_one_core_gets_its_share_of_its_core(tmp_path: Path) -> None:
    quarter = dataclasses.replace(replica(tmp_path), cpu_ids=(0,), cpu_millicores=250)
    [plan] = backend().dryrun(attempt(tmp_path, quarter))
    assert plan["container"]["cpuset_cpus"] == "0"
    assert plan["container"]["nano_cpus"] == 250_000_000


def test_with_job_accounts_a_replica_runs_as_the_jobs_account(tmp_path: Path) -> None:
    replicas = container_replicas("auto", NO_ENGINE)
    assert replicas is not None
    plan = replicas.plan(replica(tmp_path), attempt(tmp_path, replica(tmp_path)),
                         ContainerIdentity(uid=1234, gid=1235, home="/home/x"))
    assert plan.arguments["user"] == "1234:1235"
    assert plan.arguments["environment"]["HOME"] == "/home/x"


def test_a_replica_gets_its_cores_memory_labels_and_the_hosts_network(tmp_path: Path) -> None:
    [plan] = backend().dryrun(attempt(tmp_path, replica(tmp_path)))
    arguments = plan["container"]
    assert arguments["cpuset_cpus"] == "2,3"
    assert arguments["nano_cpus"] == 2_000_000_000
    assert arguments["mem_limit"] == arguments["memswap_limit"] == 3 * 1024**3
    assert arguments["labels"] == {"mlyard.job": "7", "mlyard.attempt": "2", "mlyard.replica": "worker-0",
                                   "mlyard.directory": str(tmp_path / "runs" / "7" / "2" / "worker-0")}
    assert arguments["network_mode"] == "host"
    assert "pid_mode" not in arguments
    assert arguments["init"] is True  # SIGTERM reaches the command, not a pid 1 that ignores it
    assert arguments["image"] == IMAGE and arguments["command"] == ["python3", "train.py"]
    assert "device_requests" not in arguments and "CUDA_VISIBLE_DEVICES" not in arguments["environment"]


def test_gpus_are_requested_and_numbered_from_zero_inside(tmp_path: Path) -> None:
    [plan] = backend().dryrun(attempt(tmp_path, replica(tmp_path, gpu_ids=(2, 5))))
    arguments = plan["container"]
    assert arguments["device_requests"] == [{"driver": "nvidia", "device_ids": ["2", "5"], "capabilities": [["gpu"]]}]
    assert arguments["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_only_torchrun_with_several_replicas_shares_the_hosts_process_namespace(tmp_path: Path) -> None:
    torchrun = ("torchrun", "--nnodes", "2", "train.py")
    two = attempt(tmp_path, replica(tmp_path, "worker-0", command=torchrun),
                  replica(tmp_path, "worker-1", rank=1, command=torchrun))
    assert all(plan["container"]["pid_mode"] == "host" and plan["container"]["init"] is False
               for plan in backend().dryrun(two))
    one = attempt(tmp_path, replica(tmp_path, command=torchrun))
    assert "pid_mode" not in backend().dryrun(one)[0]["container"]
    module = ("python", "-m", "torch.distributed.run", "train.py")
    two_python = attempt(tmp_path, replica(tmp_path, "worker-0", command=module),
                         replica(tmp_path, "worker-1", rank=1, command=module))
    assert all(plan["container"]["pid_mode"] == "host" for plan in backend().dryrun(two_python))
    shell = ("sh", "-c", "exec torchrun --nnodes 2 --rdzv-endpoint $MASTER_ADDR:$MASTER_PORT train.py")
    two_shell = attempt(tmp_path, replica(tmp_path, "worker-0", command=shell),
                        replica(tmp_path, "worker-1", rank=1, command=shell))
    assert all(plan["container"]["pid_mode"] == "host" for plan in backend().dryrun(two_shell))
    plain = attempt(tmp_path, replica(tmp_path, "worker-0"), replica(tmp_path, "worker-1", rank=1))
    assert all("pid_mode" not in plan["container"] for plan in backend().dryrun(plain))


def test_container_names_differ_between_servers_sharing_an_engine(tmp_path: Path) -> None:
    first = container_name(tmp_path / "a" / "runs" / "1" / "1" / "worker-0")
    second = container_name(tmp_path / "b" / "runs" / "1" / "1" / "worker-0")
    assert first != second and first.startswith("mlyard-1-1-worker-0-")


def test_a_job_without_an_image_runs_as_a_process_beside_container_jobs(tmp_path: Path) -> None:
    [plan] = backend().dryrun(attempt(tmp_path, replica(tmp_path, image=None)))
    assert "container" not in plan and "mlyard.runtime.launcher" in plan["argv"]


def test_a_process_only_server_refuses_an_image_naming_it(tmp_path: Path) -> None:
    processes = backend("process")
    assert processes.containers is None
    problem = processes.check_image(IMAGE)
    assert problem is not None and IMAGE in problem and "MLYARD_RUNTIME=process" in problem
    with pytest.raises(MlyardError, match="MLYARD_RUNTIME=process"):
        processes.dryrun(attempt(tmp_path, replica(tmp_path)))


def test_an_unreachable_engine_is_named_when_an_image_is_checked() -> None:
    problem = backend().check_image(IMAGE)
    assert problem is not None and NO_ENGINE in problem and IMAGE in problem


def test_the_container_runtime_is_refused_without_an_engine_and_unknown_runtimes_are_named() -> None:
    with pytest.raises(EngineError, match="MLYARD_RUNTIME=container.*nonexistent"):
        container_replicas("container", NO_ENGINE)
    with pytest.raises(EngineError, match="'docker'.*auto, container, process"):
        container_replicas("docker", NO_ENGINE)
    assert isinstance(container_replicas("auto", NO_ENGINE), ContainerReplicas)


def test_engine_states_are_read_from_podman_and_docker_answers() -> None:
    exited = container_state({
        "Id": "abc", "Name": "/mlyard-1-1-worker-0-x", "Config": {"Labels": {"mlyard.job": "1"}},
        "State": {"Status": "exited", "ExitCode": 137, "OOMKilled": True, "Pid": 0,
                  "StartedAt": "2026-01-02T03:04:05.123456789Z", "FinishedAt": "2026-01-02T03:04:06.5+00:00"},
    })
    assert (exited.status, exited.exit_code, exited.oom_killed, exited.pid) == ("exited", 137, True, None)
    assert exited.has_ended and not exited.never_started and exited.name == "mlyard-1-1-worker-0-x"
    assert exited.finished_at is not None and exited.started_at is not None
    assert exited.finished_at - exited.started_at == pytest.approx(1.376544, abs=1e-5)
    running = container_state({"Id": "d", "State": {"Status": "running", "ExitCode": 0, "Pid": 42,
                                                    "FinishedAt": "0001-01-01T00:00:00Z"}})
    assert running.exit_code is None and running.finished_at is None and running.pid == 42
    assert _timestamp("not a time") is None


def test_an_engine_at_a_path_is_a_unix_socket() -> None:
    assert Engine("/run/podman/podman.sock").url == "unix:///run/podman/podman.sock"
    assert Engine("tcp://10.0.0.1:2375").url == "tcp://10.0.0.1:2375"


def test_a_dataset_version_is_a_read_only_volume_at_its_host_path(tmp_path: Path) -> None:
    view = tmp_path / "dataset-views" / "7" / "digits"
    launch = dataclasses.replace(attempt(tmp_path, replica(tmp_path)),
                                 datasets=(DatasetMount(directory="data/digits", view=view),))
    [plan] = backend().dryrun(launch)
    assert plan["container"]["volumes"][str(view)] == {"bind": str(view), "mode": "ro"}
    [process] = LocalBackend(cpus=1, containers=None, hide_home=tmp_path).dryrun(
        dataclasses.replace(launch, replicas=(replica(tmp_path, image=None),)))
    config = process["config"]
    assert config["links"] == {"data/digits": str(view)} and str(view) in config["keep_read_only"]
