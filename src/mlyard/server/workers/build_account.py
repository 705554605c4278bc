"""The OS account environment builds run as. A root server never runs pip as root unless the
administrator says so (MLYARD_BUILD_USER=server): it builds as the system account
`mlyard_build` (created with `useradd` at the first build), and when that account cannot
work here the build fails saying why and how to fix it. Any other server builds as itself.

The name holds an underscore: job accounts are `MLYARD_JOB_USER_PREFIX` + a user name, and
user names hold none, so no mlyard user's job account can be the build account."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path

from mlyard.backends.local.job_accounts import _runnable_by_others, _unreachable_ancestor
from mlyard.environments.build_policy import BuildPolicy
from mlyard.environments.virtualenv import BuildAccount, BuildFailed

BUILD_ACCOUNT = "mlyard_build"
_COMMENT = "mlyard environment builds"
_FIX = ("install Python where other accounts can run it (outside a closed home directory, e.g. under "
        "/usr/local or /opt) and run the server from it, or set MLYARD_BUILD_USER=server to run builds as the "
        "server's own account (root: a build then runs with root's rights)")


def _stdlib_of(python: str) -> Path | None:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return Path(sysconfig.get_paths()["stdlib"])
    completed = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                               capture_output=True, text=True, check=False, env={"PATH": os.defpath})
    printed = completed.stdout.strip().splitlines()
    return Path(printed[-1]) if completed.returncode == 0 and printed else None


def problems(root: Path, python: str = sys.executable) -> list[str]:
    """What keeps an unprivileged account from building virtualenvs under `root` with `python`."""
    found = []
    if shutil.which("useradd") is None:
        found.append("useradd is not installed")
    if not _runnable_by_others(python):
        found.append(f"the server's Python {os.path.realpath(python)} cannot be run by other accounts")
    stdlib = _stdlib_of(python)
    if stdlib is not None and _unreachable_ancestor(stdlib / "os.py") is not None:
        found.append(f"its standard library {stdlib} is closed to other accounts")
    blocked = _unreachable_ancestor(root / "x")
    if blocked is not None and blocked != root:  # the builder opens `root` itself (0711)
        mode = stat.S_IMODE(blocked.stat().st_mode)
        found.append(f"{blocked} is closed to other accounts (mode {mode:o}), so they cannot reach {root}")
    return found


def _ensure() -> BuildAccount:
    try:
        entry = pwd.getpwnam(BUILD_ACCOUNT)
    except KeyError:
        completed = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--comment", _COMMENT, BUILD_ACCOUNT],
            capture_output=True, text=True, check=False)
        if completed.returncode not in (0, 9):  # 9: created meanwhile
            raise BuildFailed(f"could not create the OS account {BUILD_ACCOUNT!r} that builds run as: "
                              f"{completed.stderr.strip() or completed.returncode}; {_FIX}") from None
        entry = pwd.getpwnam(BUILD_ACCOUNT)
    if entry.pw_gecos != _COMMENT or entry.pw_uid == 0:
        raise BuildFailed(f"the OS account {BUILD_ACCOUNT!r} exists but was not created by mlyard (its comment "
                          f"is {entry.pw_gecos!r}); remove it, or set MLYARD_BUILD_USER=server")
    return BuildAccount(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid)


def account_for(policy: BuildPolicy, root: Path, python: str = sys.executable) -> Callable[[], BuildAccount | None]:
    """What `VirtualenvBuilder` calls at each build: None (build as the server) unless the server
    is root and MLYARD_BUILD_USER is `auto`; then the build account, or `BuildFailed`."""
    lock = threading.Lock()
    found: list[BuildAccount] = []

    def account() -> BuildAccount | None:
        if policy.build_user == "server" or os.geteuid() != 0:
            return None
        with lock:
            if found:
                return found[0]
            missing = problems(root, python)
            if missing:
                raise BuildFailed(f"environment builds run as the unprivileged account {BUILD_ACCOUNT!r} on a "
                                  f"root server, and that cannot work here: {'; '.join(missing)}. To fix it, "
                                  f"{_FIX}")
            found.append(_ensure())
            return found[0]

    return account
