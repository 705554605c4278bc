"""Jobs of different users run under different OS accounts (MLYARD_JOB_USERS=per-user, a
server running as root): one user's replica cannot read another's checkpoints, code or logs,
nor the server's database, tokens or environment, while it still reads its own files."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RunningServer, start_server, stop_server
from test_projects import as_user, log_in, person

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="separate job accounts need a server running as root, with useradd"),
]
PREFIX = "mlyt-"
# Each line: a label and a path; the job prints READ or DENIED for each.
PROBE = r"""
while read -r label path; do
    [ -z "$label" ] && continue
    if { [ -d "$path" ] && ls "$path" || cat "$path"; } > /dev/null 2>&1; then
        echo "READ $label"
    else
        echo "DENIED $label"
    fi
done < probes.txt
id -un
env | grep -c '^MLYARD_DATABASE_URL=' || true
echo "mine" > "$MLYARD_CHECKPOINT_DIR/own.txt" && cat "$MLYARD_CHECKPOINT_DIR/own.txt"
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def isolated_server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    # Not under pytest's 0700 temporary directory: job accounts must reach MLYARD_HOME.
    base = Path(tempfile.mkdtemp(prefix="mlyard-accounts-", dir="/tmp"))
    os.chmod(base, 0o711)
    server = start_server(base / "home", database=request.param, MLYARD_JOB_USERS="per-user",
                          MLYARD_JOB_USER_PREFIX=PREFIX)
    yield server
    stop_server(server)
    for entry in pwd.getpwall():
        if entry.pw_name.startswith(PREFIX) and str(server.port) in entry.pw_gecos:
            subprocess.run(["userdel", entry.pw_name], capture_output=True, check=False)
    shutil.rmtree(base, ignore_errors=True)


def submit(server: RunningServer, env: dict[str, str], code: Path, project: str, script: str) -> int:
    result = as_user(server, env, "run", "--context", str(code), "--set", f"project={project}", "--output", "json",
                     "--", "sh", script)
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)["id"]
    waited = as_user(server, env, "wait", str(job), "--timeout", "90")
    assert waited.returncode == 0, (waited.stdout, waited.stderr, as_user(server, env, "logs", str(job)).stdout)
    return job


def replica_directory(server: RunningServer, job: int) -> Path:
    (directory,) = (server.home / "runs" / str(job) / "1").iterdir()
    return directory


def test_a_replica_cannot_read_another_users_files_or_the_servers(isolated_server: RunningServer,
                                                                   tmp_path: Path) -> None:
    server, suffix = isolated_server, isolated_server.port
    project = f"lab-{suffix}"
    server.cli("projects", "add", project, check=True)
    # Members of one project: sharing jobs in the API does not open each other's files.
    alice_name, bob_name = f"alice-{suffix}", f"bob-{suffix}"
    alice = person(server, alice_name, tmp_path, {project: "member"})
    bob = person(server, bob_name, tmp_path, {project: "member"})
    log_in(server, alice, alice_name)
    log_in(server, bob, bob_name)

    alice_code = tmp_path / "alice-code"
    alice_code.mkdir()
    (alice_code / "train.sh").write_text('echo weights > "$MLYARD_CHECKPOINT_DIR/model.pt"\nid -un\n')
    alice_job = submit(server, alice, alice_code, project, "train.sh")
    alice_account = pwd.getpwnam(f"{PREFIX}{alice_name}")
    checkpoint = server.home / "checkpoints" / str(alice_job)
    assert (checkpoint / "model.pt").read_text() == "weights\n"
    assert checkpoint.stat().st_uid == alice_account.pw_uid
    assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o700
    assert f"{PREFIX}{alice_name}" in as_user(server, alice, "logs", str(alice_job)).stdout

    alice_replica = replica_directory(server, alice_job)
    targets = {
        "checkpoint": checkpoint / "model.pt",
        "checkpoint-directory": checkpoint,
        "code": alice_replica / "code" / "train.sh",
        "log": alice_replica / "output.log",
        "launch-config": alice_replica / "launch.json",
        "database": server.home / "mlyard.db",
        "admin-token": server.home / "admin.token",
        "snapshots": server.home / "blobs",
        "home-listing": server.home,
        "server-environment": Path(f"/proc/{json.loads((server.home / 'server.json').read_text())['pid']}/environ"),
    }
    probes = "\n".join(f"{label} {path}" for label, path in targets.items()) + "\n"

    bob_code = tmp_path / "bob-code"
    bob_code.mkdir()
    (bob_code / "probe.sh").write_text(PROBE)
    (bob_code / "probes.txt").write_text(probes)
    bob_job = submit(server, bob, bob_code, project, "probe.sh")
    output = as_user(server, bob, "logs", str(bob_job)).stdout
    for label in targets:
        assert f"DENIED {label}" in output, output
    lines = output.splitlines()
    assert f"{PREFIX}{bob_name}" in lines and "0" in lines, output  # bob's account; no database URL
    assert "mine" in lines, output

    # The same probe as alice reads her own checkpoint and code: the denials above are about accounts.
    (alice_code / "probe.sh").write_text(PROBE)
    (alice_code / "probes.txt").write_text(f"checkpoint {checkpoint / 'model.pt'}\ncode {targets['code']}\n")
    own = as_user(server, alice, "logs", str(submit(server, alice, alice_code, project, "probe.sh"))).stdout
    assert "READ checkpoint" in own and "READ code" in own, own


def test_an_account_that_mlyard_did_not_create_is_never_used(isolated_server: RunningServer,
                                                             tmp_path: Path) -> None:
    server, suffix = isolated_server, isolated_server.port
    name = f"carol-{suffix}"
    # A person's own account that happens to carry the name mlyard would choose.
    subprocess.run(["useradd", "--system", "--no-create-home", "--comment", f"someone else {suffix}",
                    f"{PREFIX}{name}"], check=True)
    carol = person(server, name, tmp_path, {"default": "member"})
    log_in(server, carol, name)
    result = as_user(server, carol, "run", "--no-code", "--output", "json", "--", "true")
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)["id"]
    as_user(server, carol, "wait", str(job), "--timeout", "60")
    detail = json.loads(as_user(server, carol, "show", str(job), "--output", "json").stdout)
    assert detail["status"] == "FAILED"
    assert f"OS account '{PREFIX}{name}' exists but was not created for mlyard user" in json.dumps(detail)


def test_mlyard_nodes_says_jobs_run_under_per_user_accounts(isolated_server: RunningServer) -> None:
    shown = " ".join(isolated_server.cli("nodes", check=True).stdout.split())
    assert f"jobs run as: per-user OS accounts ({PREFIX}<user>)" in shown
