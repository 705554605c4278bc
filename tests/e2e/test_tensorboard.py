"""TensorBoard: every replica gets the job's MLYARD_TENSORBOARD_DIR, and `mlyard tensorboard
JOB` serves it with a real TensorBoard."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import MLYARD, RunningServer, free_port, wait_until

pytestmark = pytest.mark.slow

CHECK_DIRECTORY = """
import os
directory = os.environ["MLYARD_TENSORBOARD_DIR"]
print("tensorboard dir", directory, "exists" if os.path.isdir(directory) else "missing")
"""


def tensorboard_executable() -> str | None:
    """The TensorFlow environment's (MLYARD_TF_ENV, set by `make test`), else one on PATH."""
    environment = os.environ.get("MLYARD_TF_ENV")
    if environment and (Path(environment) / "bin" / "tensorboard").is_file():
        return str(Path(environment) / "bin" / "tensorboard")
    return shutil.which("tensorboard")


def finished_job(server: RunningServer) -> dict:
    job = server.cli_json("run", "--no-code", "--replicas", "2", "--name", "tb", "--", "python", "-c", CHECK_DIRECTORY)
    assert server.cli("wait", str(job["id"]), "--timeout", "120").returncode == 0, server.cli("logs", str(job["id"]))
    return job


def test_every_replica_sees_the_job_directory_created_before_it_started(server: RunningServer) -> None:
    job = finished_job(server)
    with server.client() as client:
        info = client.tensorboard(job["id"])
    assert info.exists and info.job_id == job["id"]
    directory = Path(info.directory)
    assert directory == server.home / "tensorboard" / str(job["id"])
    assert directory.is_dir()
    for replica in ("0", "1"):
        log = server.cli("logs", str(job["id"]), "--replica", replica, check=True).stdout
        assert f"tensorboard dir {directory} exists" in log, log


def test_the_tensorboard_directory_of_a_missing_job_is_a_404(server: RunningServer) -> None:
    result = server.cli("tensorboard", "999999", "--tensorboard", "/bin/true")
    assert result.returncode == 1 and "job 999999 does not exist" in result.stderr


def test_without_tensorboard_the_command_says_how_to_install_it(server: RunningServer) -> None:
    env = {**server.env, "PATH": f"{Path(MLYARD).parent}:/usr/bin:/bin"}
    result = subprocess.run([MLYARD, "tensorboard", "1"], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2
    assert "TensorBoard is not installed: run `pip install tensorboard`" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_mlyard_tensorboard_serves_the_job_directory(server: RunningServer) -> None:
    executable = tensorboard_executable()
    if executable is None:
        pytest.skip("no tensorboard executable: `make test` installs one in the TensorFlow environment "
                    "(MLYARD_TF_ENV), or put one on PATH")
    job = finished_job(server)
    port = free_port()
    # Its own session, so the test can stop TensorBoard and anything it started.
    process = subprocess.Popen([MLYARD, "tensorboard", str(job["id"]), "--port", str(port),
                                "--tensorboard", executable], env=server.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        def answers() -> httpx.Response | None:
            assert process.poll() is None, process.stdout.read()
            try:
                return httpx.get(f"http://localhost:{port}/data/logdir", timeout=5)
            except httpx.TransportError:
                return None

        response = wait_until(answers, 120, "TensorBoard answering", interval=0.5)
        assert response.status_code == 200
        assert response.json()["logdir"] == str(server.home / "tensorboard" / str(job["id"]))
        assert httpx.get(f"http://localhost:{port}/", timeout=5).status_code == 200
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
