"""The server's side of job accounts: which OS account replicas run under, and the modes of
MLYARD_HOME that keep one account's files from another (`backends/local/job_accounts.py`)."""

from __future__ import annotations

import logging
import os
import sys

from mlyard.backends.local.job_accounts import JobAccounts, make_passable, resolve
from mlyard.server.settings import ServerSettings

log = logging.getLogger(__name__)


def prepare(settings: ServerSettings) -> tuple[JobAccounts | None, str | None]:
    """Creates MLYARD_HOME with the modes the chosen mode needs; returns the job accounts (None:
    replicas run as the server's own account) and a note for `mlyard nodes` when an `auto`
    setting fell back."""
    paths = settings.paths
    job_users, note = resolve(settings.job_users, paths.home, prefix=settings.job_user_prefix,
                              python=sys.executable)
    paths.home.mkdir(parents=True, exist_ok=True)
    if job_users is None:
        # Everything of this server and its jobs is this account's alone.
        os.chmod(paths.home, 0o700)
        if note:
            log.warning("%s", note)
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
    log.info("replicas run under an OS account per user (%s<name>)", settings.job_user_prefix)
    return job_users, None
