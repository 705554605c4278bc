"""The server's side of job accounts: which OS account replicas run under, and the modes of
MLYARD_HOME that keep one account's files from another (`backends/local/job_accounts.py`)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from mlyard.backends.local.job_accounts import JobAccounts, make_passable, resolve
from mlyard.errors import MlyardError
from mlyard.runtime import hide_home
from mlyard.server.settings import ServerSettings

log = logging.getLogger(__name__)


def prepare(settings: ServerSettings) -> tuple[JobAccounts | None, str]:
    """Creates MLYARD_HOME with the modes the chosen mode needs; returns the job accounts (None:
    replicas run as the server's own account) and the note for `mlyard nodes` that says which
    account jobs run as. Raises what keeps the chosen mode from working."""
    paths = settings.paths
    job_users, note = check(settings)
    paths.home.mkdir(parents=True, exist_ok=True)
    if job_users is None:
        # Everything of this server and its jobs is this account's alone.
        os.chmod(paths.home, 0o700)
        log.info("%s", note)
        return None, note
    # Files the server creates from now on (the database, logs, launch configs) are its own.
    os.umask(0o077)
    make_passable([paths.home, paths.runs, paths.checkpoints, paths.tensorboard, job_users.homes])
    paths.blobs.mkdir(exist_ok=True)
    os.chmod(paths.blobs, 0o700)
    for private in (paths.database, paths.database.with_name(paths.database.name + "-wal"),
                    paths.database.with_name(paths.database.name + "-shm"), paths.admin_token,
                    paths.server_log, paths.server_info):
        if private.exists():
            os.chmod(private, 0o600)
    log.info("%s", note)
    return job_users, note


def check(settings: ServerSettings) -> tuple[JobAccounts | None, str]:
    """`resolve` for these settings; replicas on the server's own account need namespaces that
    hide MLYARD_HOME from them, so a server that cannot make them refuses to start."""
    job_users, note = resolve(settings.job_users, settings.paths.home, prefix=settings.job_user_prefix,
                              python=sys.executable)
    if job_users is None and settings.job_isolation == "namespace":
        problem = hide_home.probe()
        if problem is not None:
            raise MlyardError(
                f"jobs run on the server's own account, and the namespaces that keep MLYARD_HOME from them "
                f"cannot be made here ({problem}); allow unprivileged user namespaces (sysctl "
                "user.max_user_namespaces, kernel.unprivileged_userns_clone=1), run the server as root with "
                "MLYARD_JOB_USERS=per-user, or set MLYARD_JOB_ISOLATION=none to let jobs read the server's files")
    return job_users, note


def hidden_home(settings: ServerSettings, job_users: JobAccounts | None) -> Path | None:
    """What replicas on the server's own account must not see (None: nothing to hide)."""
    return settings.paths.home if job_users is None and settings.job_isolation == "namespace" else None
