"""Jobs whose spec names an `image` run in containers of a real engine, through the real server
and CLI: a two-replica DDP job, a replica over its memory limit, cancellation, a server killed
with -9 and started again, and an image the engine does not have."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    RunningServer,
    process_gone,
    start_server,
    stop_server,
    wait_for,
    wait_until,
)
from container_support import IMAGE, SOCKET, containers_of, engine, require_engine

pytestmark = pytest.mark.slow

DDP = """
import gc
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo", timeout=timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    generator = torch.Generator().manual_seed(100 * rank + step)  # each rank its own data
    loss = model(torch.randn(8, 4, generator=generator)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
weights = model.module.weight.detach().clone()
average = weights.clone()
dist.all_reduce(average)
ranks = torch.tensor([float(rank + 1)])
dist.all_reduce(ranks)
print(f"rank {rank} of {world}: sum of ranks {ranks.item():g}, in step {torch.allclose(average / world, weights)}",
      flush=True)
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(os.environ["MLYARD_CHECKPOINT_DIR"], "final.pt"))
# DDP's reducer holds the process group: left to interpreter shutdown, gloo's threads can be
# destroyed unjoined ("terminate called without an active exception", exit 134).
del model, optimizer
gc.collect()
# Both ranks leave together: a rank tearing gloo down while its peer still talks aborts the peer.
dist.barrier()
dist.destroy_process_group()
if rank == 0:  # under torchrun the rendezvous store lives with rank 0's agent: it leaves last
    import time

    time.sleep(3)
"""

COUNTER = """
import sys, time
for i in range(int(sys.argv[1])):
    print("tick", i, flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def container_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    require_engine()
    running = start_server(tmp_path_factory.mktemp("mlyard-containers"), MLYARD_RUNTIME="container",
                           MLYARD_CONTAINER_SOCKET=SOCKET)
    yield running
    stop_server(running)
    leftovers = engine()
    for container in containers_of(str(running.home)):  # what a failing test left
        leftovers.remove(container["Id"])
    leftovers.close()


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("container-code")
    (directory / "ddp.py").write_text(DDP)
    (directory / "counter.py").write_text(COUNTER)
    return directory


def run(server: RunningServer, code: Path, *arguments: str, image: str = IMAGE) -> int:
    options, command = list(arguments[: arguments.index("--")]), list(arguments[arguments.index("--") + 1:])
    job = server.cli_json("run", "--context", str(code), "--set", f"image={image}", *options, "--", *command)
    return job["id"]


def show(server: RunningServer, job_id: int) -> dict:
    return server.cli_json("show", str(job_id))


def wait_status(server: RunningServer, job_id: int, statuses: set[str], timeout: float = 180) -> dict:
    return wait_until(lambda: (detail := show(server, job_id))["status"] in statuses and detail,
                      timeout, f"job {job_id} reaching {statuses}", interval=0.5)


def log_of(server: RunningServer, job_id: int, replica: str = "0") -> str:
    return server.cli("logs", str(job_id), "--replica", replica, check=True).stdout


def test_a_two_replica_ddp_job_trains_in_containers_and_succeeds(container_server: RunningServer, code: Path) -> None:
    job_id = run(container_server, code, "--replicas", "2", "--memory", "1Gi", "--name", "ddp-in-containers",
                 "--", "python3", "ddp.py")
    detail = wait_status(container_server, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=240)
    logs = [log_of(container_server, job_id, replica) for replica in ("0", "1")]
    assert detail["status"] == "SUCCEEDED", (detail["message"], logs)
    assert "rank 0 of 2: sum of ranks 3, in step True" in logs[0]
    assert "rank 1 of 2: sum of ranks 3, in step True" in logs[1]
    assert (container_server.home / "checkpoints" / str(job_id) / "final.pt").stat().st_size > 0
    assert containers_of(str(container_server.home / "runs" / str(job_id))) == []


def test_torchrun_agents_in_two_containers_form_one_job(container_server: RunningServer, code: Path) -> None:
    # c10d rendezvous tells agents apart by host name and pid: the containers share the host's
    # process namespace for it (render.py), as they share its network.
    torchrun = ("exec python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d "
                "--rdzv-endpoint $MASTER_ADDR:$MASTER_PORT --rdzv-id job-$MLYARD_JOB_ID ddp.py")
    job_id = run(container_server, code, "--replicas", "2", "--memory", "1Gi", "--name", "torchrun-in-containers",
                 "--", "sh", "-c", torchrun)
    detail = wait_status(container_server, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=240)
    logs = [log_of(container_server, job_id, replica) for replica in ("0", "1")]
    assert detail["status"] == "SUCCEEDED", (detail["message"], logs)
    assert sorted(line for log in logs for line in log.splitlines() if "sum of ranks" in line) == [
        "rank 0 of 2: sum of ranks 3, in step True", "rank 1 of 2: sum of ranks 3, in step True"]


def test_two_processes_of_one_replica_in_a_container_form_one_world(container_server: RunningServer,
                                                                    code: Path) -> None:
    # The image has no launcher of mlyard's: a shell in the container starts the copies.
    job_id = run(container_server, code, "--replicas", "1", "--processes", "2", "--memory", "1Gi",
                 "--name", "processes-in-a-container", "--", "python3", "ddp.py")
    detail = wait_status(container_server, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=240)
    log = log_of(container_server, job_id)
    assert detail["status"] == "SUCCEEDED", (detail["message"], log)
    assert sorted(line for line in log.splitlines() if "sum of ranks" in line) == [
        "rank 0 of 2: sum of ranks 3, in step True", "rank 1 of 2: sum of ranks 3, in step True"]


def test_a_replica_over_its_memory_limit_fails_the_job_as_out_of_memory(container_server: RunningServer,
                                                                        code: Path) -> None:
    job_id = run(container_server, code, "--memory", "128Mi", "--name", "too-big", "--",
                 "python3", "-c", "import time; time.sleep(0.5); x = [bytearray(16 << 20) for _ in range(64)]")
    detail = wait_status(container_server, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert detail["status"] == "FAILED"
    assert detail["exit_code"] == 137
    assert "out of memory" in detail["message"] and "128.0 MiB" in detail["message"], detail["message"]
    assert containers_of(str(container_server.home / "runs" / str(job_id))) == []


def test_cancelling_a_container_job_leaves_no_container(container_server: RunningServer, code: Path) -> None:
    job_id = run(container_server, code, "--replicas", "2", "--name", "cancelled", "--",
                 "python3", "counter.py", "1000", "0.2")
    wait_until(lambda: "tick 2" in log_of(container_server, job_id, "1"), 60, "the second replica's ticks")
    assert len(containers_of(str(container_server.home / "runs" / str(job_id)))) == 2
    requested = time.monotonic()
    container_server.cli("cancel", str(job_id), check=True)
    detail = wait_status(container_server, job_id, {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout=60)
    assert detail["status"] == "CANCELLED"
    assert time.monotonic() - requested < 3 + 10, "stopped by SIGTERM, within the 3 s grace"
    assert {replica["exit_code"] for replica in detail["attempts"][-1]["replicas"]} == {143}
    assert containers_of(str(container_server.home / "runs" / str(job_id))) == []


def test_a_server_killed_with_9_adopts_its_containers_when_it_starts_again(tmp_path: Path, code: Path) -> None:
    require_engine()
    home = tmp_path / "home"
    server = start_server(home, MLYARD_RUNTIME="container", MLYARD_CONTAINER_SOCKET=SOCKET)
    try:
        job_id = run(server, code, "--name", "outlives-its-server", "--", "python3", "counter.py", "30", "0.2")
        wait_until(lambda: "tick 3" in log_of(server, job_id), 60, "the job's first ticks")
        pid = json.loads((home / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: process_gone(pid), timeout=10)
        assert len(containers_of(str(home))) == 1, "the container outlives the server"
        server = start_server(home, MLYARD_RUNTIME="container", MLYARD_CONTAINER_SOCKET=SOCKET)
        detail = wait_status(server, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=120)
        assert detail["status"] == "SUCCEEDED", detail["message"]
        assert log_of(server, job_id) == "".join(f"tick {i}\n" for i in range(30)), "the log is whole"
        assert containers_of(str(home)) == []
    finally:
        stop_server(server)


def test_a_job_naming_an_image_the_engine_lacks_is_refused_at_submission(container_server: RunningServer,
                                                                         code: Path) -> None:
    result = container_server.cli("run", "--context", str(code), "--set", "image=localhost/no-such-image:1",
                                  "--name", "no-image", "--", "python3", "counter.py", "1", "0")
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert "localhost/no-such-image:1" in message and "not on this server's container engine" in message, message
    jobs = container_server.cli_json("jobs", "--all")
    assert all(job["name"] != "no-image" for job in jobs)


def test_an_environment_is_built_once_as_an_image_and_jobs_run_in_it(container_server: RunningServer,
                                                                       code: Path) -> None:
    server = container_server
    name, twin = f"ctr-env-{server.port}", f"ctr-twin-{server.port}"

    def build(environment: str) -> dict:
        result = server.cli("env", "build", environment, "--from", IMAGE, "--output", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    built = build(name)
    assert (built["status"], built["kind"], built["cached"]) == ("ready", "image", False)
    assert built["image"].startswith("localhost/mlyard-env:")
    assert engine().has_image(built["image"])
    again, same = build(name), build(twin)
    assert again["cached"] and "nothing to do" in again["message"]
    assert same["cached"] and same["image"] == built["image"] and f"environment {name!r}" in same["message"]

    job = server.cli_json("run", "--context", str(code), "--set", f"environment={name}", "--", "python3",
                          "counter.py", "1", "0")["id"]
    detail = wait_status(server, job, {"SUCCEEDED", "FAILED"})
    assert detail["status"] == "SUCCEEDED", log_of(server, job)
    assert "tick 0" in log_of(server, job)
    assert not containers_of(str(server.home / "runs" / str(job)))
    for environment in (name, twin):
        server.cli("env", "rm", environment, check=True)


def test_a_container_job_reads_a_dataset_version_it_cannot_change_and_writes_a_volume_at_its_mount_point(
        container_server: RunningServer, code: Path, tmp_path: Path) -> None:
    folder = tmp_path / "labels"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "a.txt").write_text("cat\n")
    container_server.cli_json("datasets", "push", "labels", str(folder))
    volume = container_server.cli_json("volumes", "create", "cache", "--size", "1Mi")
    reader = ("import os; root = os.environ['MLYARD_DATASET_LABELS']; "
              "print('READ', open('data/labels/train/a.txt').read().strip(), os.path.samefile(root, 'data/labels'))\n"
              "try:\n    open('data/labels/train/a.txt', 'w').write('dog')\nexcept OSError as error:\n"
              "    print('REFUSED', error.__class__.__name__)\n"
              "open('/scratch/seen.txt', 'w').write('written in the container')\n"
              "print('VOLUME', os.environ['MLYARD_VOLUME_CACHE'])\n")
    (code / "labels.py").write_text(reader)
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({"name": "labels", "command": ["python3", "labels.py"], "image": IMAGE,
                                "datasets": [{"name": "labels"}], "volumes": [{"name": "cache", "path": "/scratch"}]}))
    job = container_server.cli_json("submit", str(spec), "--context", str(code))
    detail = wait_status(container_server, job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    log = log_of(container_server, job["id"])
    assert detail["status"] == "SUCCEEDED", (detail["message"], log)
    assert "READ cat True" in log and "REFUSED" in log, log
    assert "VOLUME /scratch" in log, log
    [kept] = [path for path in (container_server.home / "volumes").iterdir() if not path.name.startswith(".")]
    assert (kept / "seen.txt").read_text() == "written in the container"
    assert volume["enforcement"] is None  # no CephFS here: measured by the server
    pulled = tmp_path / "pulled"
    container_server.cli("datasets", "pull", "labels:v1", str(pulled), check=True)
    assert (pulled / "train" / "a.txt").read_text() == "cat\n"
