"""Where a job's TensorBoard logs go: `MLYARD_TENSORBOARD_DIR`, one directory per job that all
its attempts share, beside its checkpoint directory. Clients ask here rather than build the
path themselves, since only the server knows its home."""

from __future__ import annotations

from mlyard.api.jobs import TensorBoardInfo
from mlyard.paths import Paths
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow


def directory(database: Database, principal: auth.Principal, paths: Paths, job_id: int) -> TensorBoardInfo:
    auth.authorize(principal, auth.Action.READ, job_id=job_id)
    with database.reading() as session:
        auth.visible_job(principal, session.get(JobRow, job_id), job_id)
    path = paths.tensorboard_directory(job_id)
    return TensorBoardInfo(job_id=job_id, directory=str(path), exists=path.is_dir())
