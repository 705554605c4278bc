"""Separate OS accounts for the jobs of different mlyard users on one machine.

When the server runs as root, each mlyard user's replicas run under an OS account of their
own (`mlyard-alice`), created with `useradd` when a job of theirs is first launched (never by
`dryrun`, which only names it). The job's code, checkpoint and TensorBoard directories belong
to that account with mode 0700, so another user's job cannot read them, and the server's own
files (database, admin token, snapshots, launch configs with job tokens, logs) stay root's
with mode 0600/0700. The directories above them are 0711: an account can pass through to its
own directories without listing anyone else's.

`MLYARD_JOB_USERS` chooses: `per-user` (required; the server refuses to start if it cannot
keep the promise), `off` (every job runs as the server's user; the server's files stay
private to that user, umask 077), or `auto` (the default: `per-user` as root, the server's own
account otherwise). A root server in `auto` where per-user accounts cannot work refuses to
start rather than run every job as root: only an explicit `off` does that.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

from mlyard.api.nodes import JOBS_RUN_AS
from mlyard.errors import MlyardError
from mlyard.runtime.launch_config import OsAccount

MODES = ("auto", "per-user", "off")
DEFAULT_PREFIX = "mlyard-"
_OS_NAME = re.compile(r"[a-z_][a-z0-9_-]*")
_MAX_OS_NAME = 32  # useradd's limit on most systems
_COMMENT = "mlyard user {name}"
# Shown where a job has no owner on record (jobs from before accounts existed).
UNOWNED = "admin"


class JobAccountsError(MlyardError):
    http_status = 500
    code = "job_users"


def os_account_name(user_name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """`prefix + user_name` when that is a valid, short enough OS user name; otherwise a
    name derived from a hash of the user name (mlyard allows '.' and 64 characters)."""
    candidate = prefix + user_name
    if len(candidate) <= _MAX_OS_NAME and _OS_NAME.fullmatch(candidate):
        return candidate
    digest = hashlib.sha256(user_name.encode()).hexdigest()[:12]
    return f"{prefix}h{digest}"[:_MAX_OS_NAME]


class JobAccounts:
    """Maps mlyard users to OS accounts: `name_for` only names one, `account_for` creates it
    on first use. Thread-safe."""

    def __init__(self, homes: Path, prefix: str = DEFAULT_PREFIX):
        self.homes = homes
        self.prefix = prefix
        self._accounts: dict[str, OsAccount] = {}
        self._lock = threading.Lock()

    def name_for(self, user_name: str | None) -> str:
        """The OS account `account_for` gives `user_name`, without looking it up or creating it."""
        return os_account_name(user_name or UNOWNED, self.prefix)

    def account_for(self, user_name: str | None) -> OsAccount:
        """The user's OS account, created (with its home) if it does not exist yet."""
        user_name = user_name or UNOWNED
        with self._lock:
            account = self._accounts.get(user_name)
            if account is None:
                account = self._ensure(user_name)
                self._accounts[user_name] = account
            return account

    def _ensure(self, user_name: str) -> OsAccount:
        name = self.name_for(user_name)
        comment = _COMMENT.format(name=user_name)
        home = self.homes / name
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            entry = None
        if entry is None:
            completed = subprocess.run(
                ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(home),
                 "--shell", "/usr/sbin/nologin", "--comment", comment, name],
                capture_output=True, text=True, check=False)
            if completed.returncode != 0 and completed.returncode != 9:  # 9: created meanwhile
                raise JobAccountsError(f"could not create the OS account {name!r} for user {user_name!r}: "
                                    f"{completed.stderr.strip() or completed.returncode}")
            entry = pwd.getpwnam(name)
        elif entry.pw_gecos != comment:
            # Never run jobs as an account someone else made: it may be a person's own.
            raise JobAccountsError(f"the OS account {name!r} exists but was not created for mlyard user "
                                f"{user_name!r} (its comment is {entry.pw_gecos!r}); remove it or set "
                                "MLYARD_JOB_USER_PREFIX")
        account = OsAccount(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=home)
        home.mkdir(parents=True, exist_ok=True)
        self.give(account, [home])
        return account

    @staticmethod
    def give(account: OsAccount, directories: Iterable[Path]) -> None:
        """Makes each directory the account's own, mode 0700 (idempotent; its content is left as is)."""
        for directory in directories:
            os.chown(directory, account.uid, account.gid)
            os.chmod(directory, 0o700)


    @staticmethod
    def lend(account: OsAccount, directories: Iterable[Path]) -> None:
        """Lets the account read each directory (group, mode 0750) without owning it: what it
        holds stays the server's, so the account cannot change it."""
        for directory in directories:
            make_passable([directory.parent])
            os.chown(directory, -1, account.gid)
            os.chmod(directory, 0o750)


def make_passable(directories: Iterable[Path]) -> None:
    """Mode 0711: other accounts may pass through, not list or read."""
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o711)


def _unreachable_ancestor(path: Path) -> Path | None:
    """The first directory above `path` that other accounts cannot pass through."""
    for ancestor in reversed(path.resolve().parents):
        try:
            mode = ancestor.stat().st_mode
        except OSError:
            return ancestor
        if not mode & stat.S_IXOTH:
            return ancestor
    return None


def _runnable_by_others(executable: str) -> bool:
    real = Path(os.path.realpath(executable))
    try:
        mode = real.stat().st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IXOTH) and _unreachable_ancestor(real) is None


def _python_problem(python: str) -> tuple[str, str] | None:
    """What keeps other accounts from running `python`, and how to fix it; None if nothing."""
    if _runnable_by_others(python):
        return None
    real = Path(os.path.realpath(python))
    blocked = _unreachable_ancestor(real)
    if blocked is None:
        return f"the server's Python {real} cannot be run by other accounts", f"chmod o+rx {real}"
    return (f"the server's Python {real} cannot be run by other accounts ({blocked} is closed to them)",
            f"run the server with a Python outside {blocked} (e.g. a virtualenv of /usr/bin/python3 under /opt)"
            f" or chmod o+x {blocked}")


def jobs_run_as(accounts: JobAccounts | None, mode: str) -> str:
    """The line `mlyard nodes` shows: which OS account the replicas run as."""
    if accounts is not None:
        return f"{JOBS_RUN_AS}per-user OS accounts ({accounts.prefix}<user>)"
    me = pwd.getpwuid(os.geteuid()).pw_name
    if mode == "off":
        return f"{JOBS_RUN_AS}{me} (MLYARD_JOB_USERS=off)"
    return f"{JOBS_RUN_AS}{me}, the server's own account (it does not run as root: no per-user accounts)"


def resolve(mode: str, home: Path, *, prefix: str = DEFAULT_PREFIX,
            python: str | None = None) -> tuple[JobAccounts | None, str]:
    """The job accounts to use under `mode` (None: the server's own account), and the line
    saying what jobs run as. Raises what stops `per-user`, and, as root, what stops `auto`."""
    if mode == "off":
        return None, jobs_run_as(None, mode)
    if os.geteuid() != 0:
        if mode == "per-user":
            raise MlyardError("MLYARD_JOB_USERS=per-user cannot work: the server does not run as root")
        return None, jobs_run_as(None, mode)  # one unprivileged account: nothing to separate jobs into
    problems, fixes = [], []
    if shutil.which("useradd") is None:
        problems.append("useradd is not installed")
        fixes.append("install useradd (the passwd package)")
    blocked = _unreachable_ancestor(home)  # MLYARD_HOME itself is made passable at start
    if blocked is not None:
        problems.append(f"{blocked} is closed to other accounts (mode {stat.S_IMODE(blocked.stat().st_mode):o}), "
                        f"so they cannot reach MLYARD_HOME {home}")
        fixes.append(f"choose an MLYARD_HOME outside {blocked} or chmod o+x {blocked}")
    if mode == "per-user" and problems:
        raise MlyardError(f"MLYARD_JOB_USERS=per-user cannot work: {'; '.join(problems)}")
    found = _python_problem(python) if mode == "auto" and python is not None else None
    if found is not None:
        problems.append(found[0])
        fixes.append(found[1])
    if problems:
        fixes = list(dict.fromkeys(fixes))
        raise MlyardError(
            f"MLYARD_JOB_USERS=auto: the server runs as root but cannot run jobs under per-user OS accounts: "
            f"{'; '.join(problems)}. To fix it, {'; '.join(fixes)}; or set MLYARD_JOB_USERS=off to run "
            "every job as root")
    accounts = JobAccounts(home / "homes", prefix)
    return accounts, jobs_run_as(accounts, mode)
