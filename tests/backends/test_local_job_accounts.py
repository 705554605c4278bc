"""Choosing whose OS account replicas run under, and what a replica of another account inherits."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for

from mlyard.backends.base import AttemptLaunch, ReplicaLaunch
from mlyard.backends.local.containers import container_replicas
from mlyard.backends.local.job_accounts import JobAccounts, os_account_name, resolve
from mlyard.backends.local.processes import LocalBackend
from mlyard.paths import Paths
from mlyard.errors import MlyardError
from mlyard.runtime.launch_config import OsAccount
from mlyard.runtime.launcher import _account_environment
from mlyard.server.control import job_accounts
from mlyard.server.settings import ServerSettings

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the checks differ for an unprivileged server")


def test_account_names_are_valid_distinct_and_short() -> None:
    assert os_account_name("alice") == "mlyard-alice"
    assert os_account_name("alice", "lab-") == "lab-alice"
    dotted, other, long = os_account_name("a.b"), os_account_name("a-b.c"), os_account_name("x" * 64)
    assert len({dotted, other, long, os_account_name("a-b")}) == 4
    for name in (dotted, other, long):
        assert name.startswith("mlyard-h") and len(name) <= 32 and "." not in name


def test_off_keeps_every_job_on_the_servers_account_and_says_so(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert resolve("off", tmp_path / "home") == (None, f"jobs run as: {me} (MLYARD_JOB_USERS=off)")


@pytest.fixture
def open_directory() -> Iterator[Path]:
    """A directory every account can pass through (pytest's own are closed)."""
    directory = Path(tempfile.mkdtemp(prefix="mlyard-open-", dir="/tmp"))
    os.chmod(directory, 0o711)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def closed_home(base: Path) -> Path:
    closed = base / "closed"
    closed.mkdir(mode=0o700)
    os.chmod(closed, 0o700)
    return closed / "home"


@as_root
def test_per_user_refuses_a_home_other_accounts_cannot_reach(open_directory: Path) -> None:
    home = closed_home(open_directory)
    with pytest.raises(MlyardError, match=f"{home.parent} is closed to other accounts .mode 700."):
        resolve("per-user", home)


@as_root
def test_auto_as_root_refuses_what_would_run_jobs_as_root_and_says_how_to_fix_it(open_directory: Path) -> None:
    with pytest.raises(MlyardError, match="closed to other accounts") as refused:
        resolve("auto", closed_home(open_directory))
    assert "MLYARD_JOB_USERS=off to run every job as root" in str(refused.value)

    hidden_python = open_directory / "closed" / "python3"
    hidden_python.write_text("")
    os.chmod(hidden_python, 0o755)
    with pytest.raises(MlyardError, match=f"Python {hidden_python} cannot be run by other accounts") as refused:
        resolve("auto", open_directory / "home", python=str(hidden_python))
    assert f"chmod o+x {open_directory / 'closed'}" in str(refused.value)

    visible_python = open_directory / "python3"
    visible_python.write_text("")
    os.chmod(visible_python, 0o755)
    if shutil.which("useradd") is not None:
        accounts, note = resolve("auto", open_directory / "home", python=str(visible_python))
        assert note == "jobs run as: per-user OS accounts (mlyard-<user>)"
        assert accounts.homes == open_directory / "home" / "homes"


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as an unprivileged server")
def test_an_unprivileged_server_has_no_accounts_to_separate(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    accounts, note = resolve("auto", tmp_path / "home")
    assert accounts is None and note.startswith(f"jobs run as: {me}, the server's own account")
    with pytest.raises(MlyardError, match="does not run as root"):
        resolve("per-user", tmp_path / "home")


def test_with_one_account_the_servers_home_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    accounts, _ = job_accounts.prepare(ServerSettings(paths=Paths(home), job_users="off"))
    assert accounts is None and stat.S_IMODE(home.stat().st_mode) == 0o700


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("job_users", "always", "MLYARD_JOB_USERS='always': choose one of auto, per-user, off"),
    ("job_user_prefix", "Lab ", "MLYARD_JOB_USER_PREFIX='Lab ': up to 16 lowercase letters"),
    ("job_isolation", "chroot", "MLYARD_JOB_ISOLATION='chroot': choose one of namespace, none"),
    ("job_env_passthrough", ("A=B",), "MLYARD_JOB_ENV_PASSTHROUGH: 'A=B' is not a variable name"),
])
def test_bad_settings_are_named(tmp_path: Path, variable: str, value: str, message: str) -> None:
    with pytest.raises(MlyardError, match=message.replace("(", r"\(")):
        ServerSettings(paths=Paths(tmp_path), **{variable: value})


def test_a_server_that_cannot_hide_its_home_from_jobs_refuses_to_start_unless_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlyard.runtime import hide_home

    monkeypatch.setattr(hide_home, "probe", lambda: "unshare: Operation not permitted")
    with pytest.raises(MlyardError, match="cannot be made here .unshare: Operation not permitted.") as refused:
        job_accounts.check(ServerSettings(paths=Paths(tmp_path), job_users="off"))
    assert "MLYARD_JOB_ISOLATION=none" in str(refused.value)
    accounts, note = job_accounts.check(ServerSettings(paths=Paths(tmp_path), job_users="off", job_isolation="none"))
    assert accounts is None and note.startswith("jobs run as: ")


def test_a_replica_of_another_account_inherits_nothing_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLYARD_DATABASE_URL", "postgresql://mlyard:secret@db/mlyard")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hidden")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    environment = _account_environment(OsAccount(name="mlyard-alice", uid=1234, gid=1234, home=Path("/h/alice")))
    assert "MLYARD_DATABASE_URL" not in environment and "AWS_SECRET_ACCESS_KEY" not in environment
    assert environment["HOME"] == "/h/alice" and environment["USER"] == "mlyard-alice"
    assert environment["LC_ALL"] == "C.UTF-8" and environment["PATH"] == os.environ["PATH"]


def test_accounts_are_looked_up_once(tmp_path: Path) -> None:
    accounts = JobAccounts(tmp_path / "homes")
    calls = []
    accounts._ensure = lambda name: calls.append(name) or name  # type: ignore[method-assign]
    assert accounts.account_for("alice") == accounts.account_for("alice") == "alice"
    assert accounts.account_for(None) == "admin" and calls == ["alice", "admin"]


def account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_dryrun_names_the_account_it_would_use_and_creates_none(tmp_path: Path) -> None:
    owner = f"dry{uuid.uuid4().hex[:8]}"
    accounts = JobAccounts(tmp_path / "homes", prefix="mlydry-")
    name = accounts.name_for(owner)
    assert name == f"mlydry-{owner}" and not account_exists(name)
    checkpoints = tmp_path / "checkpoints" / "3"
    checkpoints.mkdir(parents=True)
    before = checkpoints.stat()
    # Rendering a container needs no engine: nothing listens on this socket.
    backend = LocalBackend(cpus=1, gpus=(), job_accounts=accounts,
                           containers=container_replicas("auto", "unix:///nonexistent/engine.sock"))
    replicas = tuple(
        ReplicaLaunch(replica_id=rank + 1, name=f"worker-{rank}", rank=rank, node="local", cpu_ids=(0,), gpu_ids=(),
                      memory_bytes=1 << 28, command=("python3", "train.py"), env={},
                      directory=tmp_path / "runs" / "3" / "1" / f"worker-{rank}", snapshot=None, image=image)
        for rank, image in enumerate((None, "localhost/some-image:1")))
    launch = AttemptLaunch(job_id=3, attempt=1, replicas=replicas, owner=owner, private_directories=(checkpoints,))

    process_plan, container_plan = backend.dryrun(launch)

    assert process_plan["account"] == container_plan["account"] == name
    assert process_plan["config"]["run_as"] is None  # its ids exist only once launch has made the account
    assert container_plan["container"]["user"] == name
    assert not account_exists(name), "dryrun created the OS account"
    assert not (tmp_path / "homes").exists() and not (tmp_path / "runs").exists()
    after = checkpoints.stat()
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)


@as_root
@pytest.mark.skipif(shutil.which("useradd") is None, reason="useradd is not installed")
def test_launch_creates_the_account_and_gives_it_the_jobs_directories(open_directory: Path) -> None:
    owner = f"lau{uuid.uuid4().hex[:8]}"
    accounts = JobAccounts(open_directory / "homes", prefix="mlylau-")
    name = accounts.name_for(owner)
    checkpoints = open_directory / "checkpoints" / "4"
    checkpoints.mkdir(parents=True)
    directory = open_directory / "runs" / "4" / "1" / "worker-0"
    replica = ReplicaLaunch(replica_id=1, name="worker-0", rank=0, node="local", cpu_ids=(0,), gpu_ids=(),
                            memory_bytes=1 << 28, command=("/bin/sh", "-c", "id -u"), env={}, directory=directory,
                            snapshot=None)
    launch = AttemptLaunch(job_id=4, attempt=1, replicas=(replica,), owner=owner, private_directories=(checkpoints,))
    backend = LocalBackend(cpus=1, gpus=(), job_accounts=accounts, containers=None)
    try:
        [reference] = backend.launch(launch)
        assert (reference.directory, reference.pid is not None) == (directory, True)
        account = pwd.getpwnam(name)
        assert wait_for(lambda: backend.observe([reference])[1].is_gone, timeout=15)
        assert backend.observe([reference])[1].exit_code == 0, (directory / "output.log").read_text()
        assert (directory / "output.log").read_text() == f"{account.pw_uid}\n"
        assert (checkpoints.stat().st_uid, stat.S_IMODE(checkpoints.stat().st_mode)) == (account.pw_uid, 0o700)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
