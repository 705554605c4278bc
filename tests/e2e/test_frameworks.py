"""Each framework's own documented usage, unchanged, runs as an mlyard job on CPU
(docs/frameworks.md): Lightning, torchrun, processes per replica, Accelerate, TensorFlow's
parameter-server strategy, a two-stage pipeline; and the success policies that let a job
whose servers never exit succeed.

The training jobs are expensive on a 2-core machine, and what they check is the replicas'
environment rather than the database: they run on SQLite only. The success-policy jobs are
tiny shell commands and decide status changes, so they run on both databases.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import REPOSITORY, RunningServer, processes_alive, replica_pids, wait_until

pytestmark = pytest.mark.slow

# The training jobs: one database is enough (see the module's docstring).
one_database = pytest.mark.parametrize("server", ["sqlite"], indirect=True)

JOB_TIMEOUT = 240  # seconds a training job may take on a loaded 2-core machine
SHA_LINE = re.compile(r"^(?:\[rank (\d+)\] )?weights rank=(\d+) sha256=([0-9a-f]{64})$", re.MULTILINE)


def submit(server: RunningServer, spec: str | Path, *overrides: str, code: bool = True) -> int:
    arguments = ["submit", str(spec)]
    for override in overrides:
        arguments += ["--set", override]
    if not code:
        arguments.append("--no-code")
    return server.cli_json(*arguments)["id"]


def wait_for_job(server: RunningServer, job_id: int, timeout: float = JOB_TIMEOUT) -> dict:
    """Waits for the job to end and returns `mlyard show`; fails with its logs unless it succeeded."""
    server.cli("wait", str(job_id), "--timeout", str(timeout), timeout=timeout + 60)
    detail = server.cli_json("show", str(job_id))
    if detail["status"] != "SUCCEEDED":
        logs = {replica["name"]: server.cli("logs", str(job_id), "--replica", str(replica["rank"])).stdout[-3000:]
                for replica in detail["attempts"][-1]["replicas"]}
        raise AssertionError(f"job {job_id} ended {detail['status']}: {detail['message']}\n{logs}")
    return detail


def replica_logs(server: RunningServer, job_id: int, replicas: int) -> list[str]:
    return [server.cli("logs", str(job_id), "--replica", str(rank), check=True).stdout for rank in range(replicas)]


def weight_checksums(logs: list[str]) -> dict[int, str]:
    """rank -> sha256 of its final weights, from every replica's log."""
    checksums = {}
    for log in logs:
        for prefix, rank, digest in SHA_LINE.findall(log):
            assert not prefix or prefix == rank, f"[rank {prefix}] printed rank {rank}'s line"
            assert int(rank) not in checksums, f"rank {rank} reported twice"
            checksums[int(rank)] = digest
    return checksums


def final_accuracy(log: str) -> float:
    return float(re.findall(r"^(?:\[rank 0\] )?final test_accuracy=([0-9.]+)$", log, re.MULTILINE)[-1])


def job_processes(server: RunningServer, job_id: int) -> list[psutil.Process]:
    """Live processes that run as part of this server's job: they carry its MLYARD_JOB_ID and
    MLYARD_API (other servers of the session number their jobs from 1 too)."""
    found = []
    for process in psutil.process_iter(["environ"]):
        try:
            environment = process.info["environ"] or {}
            if (environment.get("MLYARD_JOB_ID") == str(job_id)
                    and f":{server.port}" in environment.get("MLYARD_API", "")
                    and process.status() != psutil.STATUS_ZOMBIE):
                found.append(process)
        except psutil.Error:
            pass
    return found


def command_pids(server: RunningServer, job_id: int, attempt: int = 1) -> list[int]:
    """The pid of each replica's command (its first process), from the launchers' started.json."""
    pids = []
    for started in (server.home / "runs" / str(job_id) / str(attempt)).glob("*/started.json"):
        pids.append(json.loads(started.read_text())["pid"])
    return pids


def assert_nothing_left(server: RunningServer, job_id: int) -> None:
    detail = server.cli_json("show", str(job_id))
    launchers, commands = replica_pids(detail), command_pids(server, job_id)
    assert launchers and commands
    wait_until(lambda: not processes_alive(launchers + commands) and not job_processes(server, job_id), 15,
               f"job {job_id}'s processes to be gone")


# --- PyTorch Lightning --------------------------------------------------------------------


@one_database
def test_lightning_ddp_on_two_nodes_forms_one_world_with_equal_weights(server: RunningServer) -> None:
    job_id = submit(server, "examples/lightning-ddp.yaml", "max_runtime=4m")
    wait_for_job(server, job_id)
    logs = replica_logs(server, job_id, 2)
    seen = []
    for log in logs:
        found = re.search(r"^lightning global_rank=(\d+) world_size=(\d+) node_rank=(\d+) local_rank=(\d+)", log,
                          re.MULTILINE)
        assert found, log[-3000:]
        seen.append(tuple(int(value) for value in found.groups()))
    assert sorted(seen) == [(0, 2, 0, 0), (1, 2, 1, 0)], seen
    checksums = weight_checksums(logs)
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert final_accuracy(logs[0]) >= 0.85


# --- torchrun and processes per replica ---------------------------------------------------


def assert_world_of_four(logs: list[str], prefixed: bool) -> None:
    ranks = {}
    for node, log in enumerate(logs):
        for prefix, rank, world, local_rank, node_rank in re.findall(
                r"^(?:\[rank (\d+)\] )?ddp rank=(\d+) world_size=(\d+) local_rank=(\d+) node_rank=(\d+)$",
                log, re.MULTILINE):
            assert (int(world), int(node_rank)) == (4, node), log[-3000:]
            assert int(rank) == 2 * node + int(local_rank), (rank, node, local_rank)
            if prefixed:
                assert prefix == rank, f"a copy's lines start with [rank {rank}]: {log[-2000:]}"
            ranks[int(rank)] = node
    assert ranks == {0: 0, 1: 0, 2: 1, 3: 1}, logs
    checksums = weight_checksums(logs)
    assert sorted(checksums) == [0, 1, 2, 3] and len(set(checksums.values())) == 1, checksums
    assert final_accuracy(logs[0]) >= 0.85


@one_database
def test_torchrun_with_only_nproc_per_node_forms_a_world_of_four_over_two_replicas(server: RunningServer) -> None:
    spec = yaml.safe_load((REPOSITORY / "examples" / "torchrun-ddp.yaml").read_text())
    assert spec["command"] == ["torchrun", "--nproc-per-node=2", "examples/torch_ddp.py"], "no other flags"
    job_id = submit(server, "examples/torchrun-ddp.yaml", "max_runtime=4m")
    wait_for_job(server, job_id)
    assert_world_of_four(replica_logs(server, job_id, 2), prefixed=False)


@one_database
def test_two_processes_per_replica_form_a_world_of_four_with_prefixed_logs(server: RunningServer) -> None:
    job_id = submit(server, "examples/processes-ddp.yaml", "max_runtime=4m")
    wait_for_job(server, job_id)
    logs = replica_logs(server, job_id, 2)
    assert_world_of_four(logs, prefixed=True)
    for node, log in enumerate(logs):
        lines = [line for line in log.splitlines() if line.strip()]
        own = {f"[rank {2 * node}] ", f"[rank {2 * node + 1}] "}
        assert lines and all(line[:9] in own for line in lines), log[-2000:]


# --- Hugging Face Accelerate --------------------------------------------------------------


@one_database
def test_accelerate_launch_on_two_machines_forms_one_multi_cpu_world(server: RunningServer) -> None:
    job_id = submit(server, "examples/accelerate-ddp.yaml", "max_runtime=4m")
    wait_for_job(server, job_id)
    logs = replica_logs(server, job_id, 2)
    seen = []
    for log in logs:
        found = re.search(r"^accelerate process_index=(\d+) num_processes=(\d+) distributed_type=(\w+)", log,
                          re.MULTILINE)
        assert found, log[-3000:]
        seen.append(found.groups())
    assert sorted(seen) == [("0", "2", "MULTI_CPU"), ("1", "2", "MULTI_CPU")], seen
    checksums = weight_checksums(logs)
    assert sorted(checksums) == [0, 1] and len(set(checksums.values())) == 1, checksums
    assert final_accuracy(logs[0]) >= 0.85


# --- Model parallelism: a two-stage pipeline ----------------------------------------------


@one_database
def test_a_two_stage_pipeline_trains_as_well_as_the_whole_model_in_one_process(server: RunningServer) -> None:
    job_id = submit(server, "examples/pipeline-parallel.yaml", "max_runtime=4m")
    # The same model, whole, in one process on the same batches, while the job runs.
    reference = subprocess.run(
        [sys.executable, "examples/pipeline_parallel.py", "--single-process"], cwd=REPOSITORY,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300,
    )
    assert reference.returncode == 0, reference.stderr[-3000:]
    detail = wait_for_job(server, job_id)
    assert detail["spec"]["placement"]["same_node"] is True
    assert len({replica["node"] for replica in detail["attempts"][0]["replicas"]}) == 1
    logs = replica_logs(server, job_id, 2)
    for stage, log in enumerate(logs):
        assert re.search(rf"^pipeline stage={stage} of 2 world_size=2 ", log, re.MULTILINE), log[-3000:]
    single, pipelined = final_accuracy(reference.stdout), final_accuracy(logs[1])
    assert single >= 0.9, reference.stdout
    assert pipelined >= single - 0.02, (pipelined, single)


# --- TensorFlow parameter-server training -------------------------------------------------


@one_database
def test_the_tensorflow_parameter_server_example_succeeds_when_its_chief_does(server: RunningServer) -> None:
    environment = os.environ.get("MLYARD_TF_ENV")
    if not environment:
        pytest.skip("MLYARD_TF_ENV is not set: `make test` creates the TensorFlow environment and sets it")
    tf_bin = Path(environment) / "bin"
    assert (tf_bin / "python").exists(), f"no TensorFlow environment at {environment}"
    spec = yaml.safe_load((REPOSITORY / "examples" / "tf-ps.yaml").read_text())
    assert "success_policy" not in spec, "the example relies on a TensorFlow job's default: chief"
    assert all(role["resources"]["cpu"] < 1 for role in spec["roles"]), "every task takes a share of a core"

    job_id = submit(server, "examples/tf-ps.yaml", f"env.PATH={tf_bin}:/usr/local/bin:/usr/bin:/bin",
                    "max_runtime=4m")
    detail = wait_for_job(server, job_id)
    assert "success_policy chief" in detail["message"], detail["message"]
    replicas = {replica["name"]: replica for replica in detail["attempts"][0]["replicas"]}
    assert sorted(replicas) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert (replicas["chief-0"]["state"], replicas["chief-0"]["exit_code"]) == ("exited", 0)
    for name in ("ps-0", "worker-0", "worker-1"):
        assert replicas[name]["state"] in ("exited", "lost"), replicas[name]
    assert_nothing_left(server, job_id)

    logs = {name: server.cli("logs", str(job_id), "--replica", str(replica["rank"]), check=True).stdout
            for name, replica in replicas.items()}
    assert re.search(r"^tf_ps chief workers=2 ps=1$", logs["chief-0"], re.MULTILINE), logs["chief-0"][-3000:]
    assert re.search(r"^epoch 5/5 accuracy=", logs["chief-0"], re.MULTILINE)
    assert final_accuracy(logs["chief-0"]) >= 0.85
    for name, task in (("worker-0", "worker:0"), ("worker-1", "worker:1"), ("ps-0", "ps:0")):
        assert f"tf_ps server {task} listening" in logs[name], logs[name][-3000:]


# --- Success policies ---------------------------------------------------------------------

SHARE = {"cpu": 0.25, "memory": "128Mi"}
SLEEPER = "exec sleep 600"


def policy_spec(tmp_path: Path, name: str, **fields: object) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "max_runtime": "5m", **fields}))
    return path


def wait_for_status(server: RunningServer, job_id: int, wanted: set[str], timeout: float) -> dict:
    return wait_until(lambda: (detail := server.cli_json("show", str(job_id)))["status"] in wanted and detail,
                      timeout, f"job {job_id} to become {' or '.join(sorted(wanted))}")


def assert_succeeded_promptly_with_sleepers_stopped(server: RunningServer, job_id: int, deciding: set[str],
                                                    policy: str) -> None:
    submitted = time.monotonic()
    detail = wait_for_status(server, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, 60)
    took = time.monotonic() - submitted
    assert detail["status"] == "SUCCEEDED" and detail["exit_code"] == 0, detail
    assert f"success_policy {policy}" in detail["message"], detail["message"]
    assert took < 45, f"the job took {took:.0f}s to succeed after its deciding replicas exited"
    for replica in detail["attempts"][0]["replicas"]:
        if replica["name"] in deciding:
            assert (replica["state"], replica["exit_code"]) == ("exited", 0), replica
        else:  # stopped with SIGTERM by the policy
            assert replica["state"] in ("exited", "lost") and replica["exit_code"] != 0, replica
    assert_nothing_left(server, job_id)


def test_success_policy_chief_stops_the_workers_once_the_chief_exits(server: RunningServer, tmp_path: Path) -> None:
    spec = policy_spec(tmp_path, "policy-chief", command=SLEEPER, success_policy="chief", roles=[
        {"name": "chief", "replicas": 1, "resources": SHARE, "command": ["sh", "-c", "sleep 1; echo chief done"]},
        {"name": "worker", "replicas": 2, "resources": SHARE},
    ])
    job_id = submit(server, spec, code=False)
    assert_succeeded_promptly_with_sleepers_stopped(server, job_id, {"chief-0"}, "chief")
    assert server.cli("logs", str(job_id), "--replica", "0", check=True).stdout.strip() == "chief done"


def test_success_policy_worker_0_stops_the_other_replicas_once_worker_0_exits(
    server: RunningServer, tmp_path: Path
) -> None:
    line = f'if [ "$MLYARD_REPLICA" = worker-0 ]; then sleep 1; echo worker-0 done; else {SLEEPER}; fi'
    spec = policy_spec(tmp_path, "policy-worker-0", command=line, success_policy="worker-0", roles=[
        {"name": "worker", "replicas": 2, "resources": SHARE},
        {"name": "ps", "replicas": 1, "resources": SHARE},
    ])
    job_id = submit(server, spec, code=False)
    assert_succeeded_promptly_with_sleepers_stopped(server, job_id, {"worker-0"}, "worker-0")


def test_success_policy_all_keeps_the_job_running_while_a_replica_runs(server: RunningServer, tmp_path: Path) -> None:
    line = f'if [ "$MLYARD_REPLICA" = worker-0 ]; then echo worker-0 done; else {SLEEPER}; fi'
    spec = policy_spec(tmp_path, "policy-all", command=line, success_policy="all",
                       roles=[{"name": "worker", "replicas": 2, "resources": SHARE}])
    job_id = submit(server, spec, code=False)

    def replicas() -> dict[str, dict]:
        detail = server.cli_json("show", str(job_id))
        return {r["name"]: r for attempt in detail["attempts"][:1] for r in attempt["replicas"]}

    finished = wait_until(lambda: (now := replicas()).get("worker-0", {}).get("state") == "exited" and now, 60,
                          "worker-0 to exit")
    assert finished["worker-0"]["exit_code"] == 0, finished
    time.sleep(3)  # several controller passes
    detail = server.cli_json("show", str(job_id))
    assert detail["status"] == "RUNNING", detail
    sleeper = replicas()["worker-1"]
    assert sleeper["state"] == "running" and processes_alive([sleeper["pid"]]), sleeper

    server.cli("cancel", str(job_id), check=True)
    detail = wait_for_status(server, job_id, {"CANCELLED", "SUCCEEDED", "FAILED"}, 60)
    assert detail["status"] == "CANCELLED", detail
    assert_nothing_left(server, job_id)
