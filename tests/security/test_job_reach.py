"""What a replica on the server's own account (MLYARD_JOB_USERS=off, the tests' default) may
reach: its own code, checkpoint and TensorBoard directories, never the admin token, the
database, another job's run directory or launch config, nor the server's environment; and
`mlyard nodes` says which account jobs run as."""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RunningServer, replica_pids, start_server, stop_server

pytestmark = pytest.mark.slow
SECRET = "canary-4f1c9a"
# Each line of targets.txt: a label and a path; the job prints READ or DENIED for each, then its environment.
PROBE = r"""
import json, os
for line in open("targets.txt").read().splitlines():
    label, path = line.split(" ", 1)
    try:
        if os.path.isdir(path):
            found = os.listdir(path)
            print(("READ " if found else "EMPTY ") + label, found)
        else:
            open(path, "rb").read(16)
            print("READ " + label)
    except OSError as error:
        print("DENIED " + label, type(error).__name__)
print("ENVIRONMENT " + json.dumps(dict(os.environ)))
for name in ("MLYARD_CHECKPOINT_DIR", "MLYARD_TENSORBOARD_DIR"):
    with open(os.path.join(os.environ[name], "own.txt"), "w") as handle:
        handle.write("mine")
    print("WROTE " + name, open(os.path.join(os.environ[name], "own.txt")).read())
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    home = tmp_path_factory.mktemp("reach") / "home"
    running = start_server(home, MLYARD_DATABASE_URL=f"sqlite:///{home / 'mlyard.db'}",
                           MLYARD_CANARY_SECRET=SECRET, AWS_SECRET_ACCESS_KEY=SECRET,
                           MLYARD_JOB_ENV_PASSTHROUGH="LAB_SHARED_SETTING", LAB_SHARED_SETTING="shared")
    yield running
    stop_server(running)


def run_job(server: RunningServer, code: Path, *command: str, options: tuple[str, ...] = ()) -> tuple[int, str]:
    submitted = server.cli_json("run", "--context", str(code), *options, "--", *command)
    waited = server.cli("wait", str(submitted["id"]), "--timeout", "90")
    output = server.cli("logs", str(submitted["id"]), check=True).stdout
    assert waited.returncode == 0, (waited.stdout, waited.stderr, output)
    return submitted["id"], output


def test_a_replica_reaches_its_own_directories_and_nothing_else_of_the_server(server: RunningServer,
                                                                              tmp_path: Path) -> None:
    first_code = tmp_path / "first"
    first_code.mkdir()
    (first_code / "train.sh").write_text('echo weights > "$MLYARD_CHECKPOINT_DIR/model.pt"\n')
    first, _ = run_job(server, first_code, "sh", "train.sh")
    (first_run,) = (server.home / "runs" / str(first) / "1").iterdir()
    server_pid = json.loads((server.home / "server.json").read_text())["pid"]
    home = server.home
    targets = {
        "admin-token": home / "admin.token",
        "database": home / "mlyard.db",
        "database-wal": home / "mlyard.db-wal",
        "server-log": home / "server.log",
        "snapshots": home / "blobs",
        "other-run-directory": first_run,
        "other-launch-config": first_run / "launch.json",
        "other-output": first_run / "output.log",
        "other-checkpoint": home / "checkpoints" / str(first) / "model.pt",
        "server-environment": Path(f"/proc/{server_pid}/environ"),
        "through-server-root": Path(f"/proc/{server_pid}/root{home / 'admin.token'}"),
    }
    assert all(path.exists() for label, path in targets.items() if label != "database-wal")
    code = tmp_path / "probe"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    (code / "targets.txt").write_text("\n".join(f"{label} {path}" for label, path in targets.items()) + "\n")
    # VIRTUAL_ENV is the job's to set: naming MLYARD_HOME must not mount it back.
    job, output = run_job(server, code, "python", "probe.py", options=("--set", f"env.VIRTUAL_ENV={home}"))

    for label in targets:
        assert f"DENIED {label} " in output, output
    environment = json.loads(output.split("ENVIRONMENT ", 1)[1].splitlines()[0])
    assert SECRET not in json.dumps(environment)
    assert not {"MLYARD_DATABASE_URL", "MLYARD_CANARY_SECRET", "AWS_SECRET_ACCESS_KEY", "MLYARD_HOME"} & set(environment)
    assert environment["LAB_SHARED_SETTING"] == "shared"  # what the administrator passes on
    assert environment["MLYARD_JOB_ID"] == str(job) and environment["MLYARD_TOKEN"]
    # Its own directories work as before, at the same paths the server sees.
    assert "WROTE MLYARD_CHECKPOINT_DIR mine" in output and "WROTE MLYARD_TENSORBOARD_DIR mine" in output
    assert (home / "checkpoints" / str(job) / "own.txt").read_text() == "mine"
    assert (home / "tensorboard" / str(job) / "own.txt").read_text() == "mine"


def test_a_failing_command_still_reports_its_exit_code_and_signal(server: RunningServer, tmp_path: Path) -> None:
    code = tmp_path / "fails"
    code.mkdir()
    submitted = server.cli_json("run", "--context", str(code), "--", "sh", "-c", "echo before; exit 7")
    server.cli("wait", str(submitted["id"]), "--timeout", "60")
    detail = server.cli_json("show", str(submitted["id"]))
    assert detail["status"] == "FAILED" and detail["attempts"][0]["replicas"][0]["exit_code"] == 7, detail
    assert "before" in server.cli("logs", str(submitted["id"]), check=True).stdout
    killed = server.cli_json("run", "--context", str(code), "--", "sh", "-c", "kill -9 $$")
    server.cli("wait", str(killed["id"]), "--timeout", "60")
    replica = server.cli_json("show", str(killed["id"]))["attempts"][0]["replicas"][0]
    assert replica["exit_code"] == 137, replica  # 128 + SIGKILL, as without namespaces
    missing = server.cli_json("run", "--context", str(code), "--", "no-such-command-x")
    server.cli("wait", str(missing["id"]), "--timeout", "60")
    assert "cannot run 'no-such-command-x'" in server.cli("logs", str(missing["id"]), check=True).stdout


def test_mlyard_nodes_says_which_account_jobs_run_as(server: RunningServer) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    shown = " ".join(server.cli("nodes", check=True).stdout.split())
    assert f"jobs run as: {me} (MLYARD_JOB_USERS=off)" in shown


def test_the_jobs_environment_acts_only_on_its_command_inside_the_namespaces(server: RunningServer,
                                                                             tmp_path: Path) -> None:
    """LD_PRELOAD and the like in a job's `env` reach the command, never the wrapper that makes
    the namespaces (it runs before they exist, with MLYARD_HOME in view)."""
    import psutil

    code = tmp_path / "waits"
    code.mkdir()
    submitted = server.cli_json("run", "--context", str(code), "--set", "env.JOB_MARKER=marker-7d2e", "--",
                                "sleep", "60")
    try:
        deadline = time.monotonic() + 60
        wrappers, commands = [], []
        while time.monotonic() < deadline and not commands:
            below = [child for pid in replica_pids(server.cli_json("show", str(submitted["id"])))
                     for child in psutil.Process(pid).children(recursive=True)]
            wrappers = [child for child in below if "mlyard.runtime.hide_home" in child.cmdline()]
            commands = [child for child in below if child.cmdline() == ["sleep", "60"]]
            time.sleep(0.2)
        assert wrappers and commands
        assert commands[0].environ()["JOB_MARKER"] == "marker-7d2e"
        assert all("JOB_MARKER" not in wrapper.environ() for wrapper in wrappers)
    finally:
        server.cli("cancel", str(submitted["id"]))
