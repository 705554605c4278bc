"""What a server process opens first: the database (migrated, with its admin), the blob store and
the backend. The serving process and the controller's (`control/process.py`) both open them."""

from __future__ import annotations

import logging

from mlyard.backends.base import Backend
from mlyard.server import auth
from mlyard.server.control import job_accounts
from mlyard.server.settings import ServerSettings
from mlyard.server.store.db import Database
from mlyard.storage import BlobStore

log = logging.getLogger("mlyard.server")


def open_server(settings: ServerSettings, backend: Backend | None) -> tuple[Database, BlobStore, Backend]:
    """The database (migrated, with its admin), the blob store and the backend (`backend`, or
    the one the settings choose)."""
    from mlyard.backends.local.processes import LocalBackend

    job_users, job_users_note = None, ""
    if backend is None and settings.backend == "local":
        job_users, job_users_note = job_accounts.prepare(settings)
    else:
        settings.paths.home.mkdir(parents=True, exist_ok=True)
    database = Database.open(settings.effective_database_url)
    auth.ensure_admin(database, settings.paths.admin_token)
    blobs = BlobStore(settings.paths.blobs)
    if swept := blobs.sweep_temporary():  # left by a server killed during an upload
        log.info("removed %d unfinished upload(s) from %s", swept, blobs.temporary_directory)
    if backend is not None:
        return database, blobs, backend
    if settings.backend == "kubernetes":
        from mlyard.backends.kubernetes import KubernetesSettings, create_backend

        return database, blobs, create_backend(KubernetesSettings.from_environment(),
                                               max_log_bytes=settings.max_log_bytes)
    from mlyard.backends.local.containers import container_replicas

    return database, blobs, LocalBackend(
        cpus=settings.node_cpus, memory_bytes=settings.node_memory, max_log_bytes=settings.max_log_bytes,
        job_accounts=job_users, notes=(job_users_note,) if job_users_note else (),
        hide_home=job_accounts.hidden_home(settings, job_users), env_passthrough=settings.job_env_passthrough,
        volumes_root=settings.paths.volumes,
        containers=container_replicas(settings.runtime, settings.container_socket, max_log_bytes=settings.max_log_bytes))
