"""The shipped examples run as real distributed jobs through the real server and CLI."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import REPOSITORY, RunningServer

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
