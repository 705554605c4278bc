"""The shipped examples run as real distributed jobs through the real server and CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from conftest import REPOSITORY, RunningServer, process_gone, wait_until

from mlyard.runtime.launch_config import HEARTBEAT_TIMEOUT

pytestmark = pytest.mark.slow


def test_the_digits_ddp_example_trains_to_95_percent_on_two_replicas(server: RunningServer) -> None:
    result = server.cli("submit", "examples/digits-ddp.yaml", "--follow", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    accuracy = float(re.findall(r"^final test_accuracy=([0-9.]+)", result.stdout, re.MULTILINE)[-1])
    assert accuracy >= 0.95
    assert re.search(r"epoch \d+/\d+ loss=", result.stdout), "progress was streamed while it ran"
    assert "SUCCEEDED" in result.stderr

    job_id = int(re.search(r"Submitted job (\d+)", result.stderr).group(1))
    detail = server.cli_json("show", str(job_id))
    assert detail["status"] == "SUCCEEDED" and detail["exit_code"] == 0
    rendezvous = []
    for rank in ("0", "1"):
        log = server.cli("logs", str(job_id), "--replica", rank, check=True).stdout
        rendezvous.append(re.search(r"rendezvous rank=(\d+) world_size=(\d+) local_rank=\d+ master=(\S+)", log).groups())
    assert sorted(rank for rank, _, _ in rendezvous) == ["0", "1"], "distinct RANKs"
    assert {world for _, world, _ in rendezvous} == {"2"}, "one WORLD_SIZE"
    assert len({master for _, _, master in rendezvous}) == 1, "one MASTER_ADDR:MASTER_PORT"
    cpus = [replica["cpu_ids"] for replica in detail["attempts"][0]["replicas"]]
    assert sorted(cpu for ids in cpus for cpu in ids) == [0, 1], "each replica pinned to a core of its own"
    assert (server.home / "checkpoints" / str(job_id) / "final.pt").is_file()
    points = server.cli_json("metrics", str(job_id))
    by_name: dict[str, list[int]] = {}
    for point in points:
        by_name.setdefault(point["name"], []).append(point["step"])
    assert by_name == {name: list(range(1, 21)) for name in ("loss", "test_accuracy", "samples_per_second")}
    assert max(p["value"] for p in points if p["name"] == "test_accuracy") >= 0.95


@pytest.mark.parametrize("failure", ["sigkill-command", "sigstop-launcher"])
def test_the_digits_example_resumes_from_its_checkpoint_after_a_replica_is_lost(
    server: RunningServer, failure: str
) -> None:
    job_id = server.cli_json(
        "submit", "examples/digits-ddp.yaml",
        # Slow enough to be interrupted mid-training.
        "--set", 'command=["python", "examples/digits_ddp.py", "--epoch-delay", "0.5"]',
        "--set", "restart_policy={max_restarts: 1, backoff_seconds: 0}",
    )["id"]
    wait_until(lambda: "checkpoint saved at epoch 2" in server.cli("logs", str(job_id)).stdout, 180,
               "the first checkpoints")

    [victim] = [r for r in server.cli_json("show", str(job_id))["attempts"][0]["replicas"] if r["rank"] == 1]
    failed_at = time.time()
    if failure == "sigkill-command":  # rank 1's training process dies, as under the OOM killer
        started = json.loads((server.home / "runs" / str(job_id) / "1" / "worker-1" / "started.json").read_text())
        os.kill(started["pid"], signal.SIGKILL)
    else:  # rank 1's launcher freezes, as on a hung node: its pid stays, only its heartbeat stops
        os.kill(victim["pid"], signal.SIGSTOP)

    result = server.cli("wait", str(job_id), "--timeout", "300")
    detail = server.cli_json("show", str(job_id))
    assert result.returncode == 0, detail
    assert detail["status"] == "SUCCEEDED" and len(detail["attempts"]) == 2, detail
    first = detail["attempts"][0]
    assert first["stop_outcome"] == "RESTARTING" and "restart 1 of 1" in first["stop_reason"], first
    [failed] = [r for r in first["replicas"] if r["rank"] == 1]
    if failure == "sigkill-command":
        assert "worker-1 (rank 1) exited with code 137" in first["stop_reason"], first
        assert (failed["state"], failed["exit_code"], first["exit_code"]) == ("exited", 137, 137)
    else:
        assert "disappeared without an exit status" in first["stop_reason"], first
        assert failed["state"] == "lost"
        assert failed["finished_at"] - failed_at <= HEARTBEAT_TIMEOUT + 5, "the frozen replica was noticed late"
    assert process_gone(victim["pid"]), "the failed replica's launcher was left behind"
    shown = server.cli("show", str(job_id), check=True).stdout
    assert "#1" in shown and "FAILED, restarted" in shown and "restarts" in shown, shown

    before = server.cli("logs", str(job_id), "--attempt", "1", check=True).stdout
    last_saved = int(re.findall(r"^checkpoint saved at epoch (\d+)$", before, re.MULTILINE)[-1])
    logs = {rank: server.cli("logs", str(job_id), "--attempt", "2", "--replica", rank, check=True).stdout
            for rank in ("0", "1")}
    resumed = set()
    for log in logs.values():
        found = re.search(r"^resumed from checkpoint at epoch (\d+) \(restart \d+\)$", log, re.MULTILINE)
        assert found, log[-2000:]
        resumed.add(int(found.group(1)))
    [epoch] = resumed
    # Rank 0 may have been stopped between saving a checkpoint and saying so.
    assert last_saved <= epoch <= last_saved + 1, (last_saved, epoch)
    trained = [int(number) for number in re.findall(r"^epoch (\d+)/20 ", logs["0"], re.MULTILINE)]
    assert trained == list(range(epoch + 1, 21)), "the second attempt trained only the epochs left"
    accuracy = float(re.search(r"^final test_accuracy=([0-9.]+)", logs["0"], re.MULTILINE).group(1))
    assert accuracy >= 0.95


def test_the_tensorflow_multiworker_example_runs_on_two_workers(server: RunningServer) -> None:
    environment = os.environ.get("MLYARD_TF_ENV")
    if not environment:
        pytest.skip("MLYARD_TF_ENV is not set: `make test` creates the TensorFlow environment and sets it")
    tf_bin = Path(environment) / "bin"
    assert (tf_bin / "python").exists(), f"no TensorFlow environment at {environment}"
    result = server.cli(
        "submit", "examples/tf-multiworker.yaml", "--follow",
        "--set", f"env.PATH={tf_bin}:/usr/local/bin:/usr/bin:/bin", timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert re.search(r"^final loss=[0-9.]+ accuracy=[0-9.]+", result.stdout, re.MULTILINE)
    job_id = int(re.search(r"Submitted job (\d+)", result.stderr).group(1))
    tasks = []
    for rank in ("0", "1"):
        log = server.cli("logs", str(job_id), "--replica", rank, check=True).stdout
        tasks.append(re.search(r"tf_config task=(\w+:\d+) workers=(\d+)", log).groups())
    assert sorted(tasks) == [("worker:0", "2"), ("worker:1", "2")]


def test_examples_are_in_the_repository() -> None:
    for name in ("digits_ddp.py", "digits-ddp.yaml", "tf_multiworker.py", "tf-multiworker.yaml"):
        assert (REPOSITORY / "examples" / name).is_file(), name
