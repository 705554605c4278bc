"""Choosing whose OS account replicas run under, and what a replica of another account inherits."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlyard.backends.local.job_accounts import JobUsers, os_account_name, resolve
from mlyard.paths import Paths
from mlyard.errors import MlyardError
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


def test_off_keeps_every_job_on_the_servers_account(tmp_path: Path) -> None:
    assert resolve("off", tmp_path / "home") == (None, None)


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
def test_auto_falls_back_with_the_reason(open_directory: Path) -> None:
    job_users, note = resolve("auto", closed_home(open_directory))
    assert job_users is None and "jobs of every user run as root" in note and "closed to other accounts" in note

    hidden_python = open_directory / "closed" / "python3"
    hidden_python.write_text("")
    os.chmod(hidden_python, 0o755)
    job_users, note = resolve("auto", open_directory / "home", python=str(hidden_python))
    assert job_users is None and f"Python {hidden_python} cannot be run by other accounts" in note

    visible_python = open_directory / "python3"
    visible_python.write_text("")
    os.chmod(visible_python, 0o755)
    job_users, note = resolve("auto", open_directory / "home", python=str(visible_python))
    if shutil.which("useradd") is not None:
        assert note is None and job_users.homes == open_directory / "home" / "homes"


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as an unprivileged server")
def test_an_unprivileged_server_has_no_accounts_to_separate(tmp_path: Path) -> None:
    assert resolve("auto", tmp_path / "home") == (None, None)
    with pytest.raises(MlyardError, match="does not run as root"):
        resolve("per-user", tmp_path / "home")


def test_with_one_account_the_servers_home_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    job_users, _ = job_accounts.prepare(ServerSettings(paths=Paths(home), job_users="off"))
    assert job_users is None and stat.S_IMODE(home.stat().st_mode) == 0o700


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("job_users", "always", "MLYARD_JOB_USERS='always': choose one of auto, per-user, off"),
    ("job_user_prefix", "Lab ", "MLYARD_JOB_USER_PREFIX='Lab ': up to 16 lowercase letters"),
])
def test_bad_settings_are_named(tmp_path: Path, variable: str, value: str, message: str) -> None:
    with pytest.raises(MlyardError, match=message.replace("(", r"\(")):
        ServerSettings(paths=Paths(tmp_path), **{variable: value})


def test_a_replica_of_another_account_inherits_nothing_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLYARD_DATABASE_URL", "postgresql://mlyard:secret@db/mlyard")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hidden")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    environment = _account_environment({"name": "mlyard-alice", "uid": 1234, "gid": 1234, "home": "/h/alice"})
    assert "MLYARD_DATABASE_URL" not in environment and "AWS_SECRET_ACCESS_KEY" not in environment
    assert environment["HOME"] == "/h/alice" and environment["USER"] == "mlyard-alice"
    assert environment["LC_ALL"] == "C.UTF-8" and environment["PATH"] == os.environ["PATH"]


def test_accounts_are_looked_up_once(tmp_path: Path) -> None:
    job_users = JobUsers(tmp_path / "homes")
    calls = []
    job_users._ensure = lambda name: calls.append(name) or name  # type: ignore[method-assign]
    assert job_users.account_for("alice") == job_users.account_for("alice") == "alice"
    assert job_users.account_for(None) == "admin" and calls == ["alice", "admin"]
