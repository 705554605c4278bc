"""The trees of the dataset versions a job reads (and where it writes the ones it makes): `dataset-views/<job>/<dataset>/`, each file a
hard link to its blob, so a version of any size is shown without copying a byte.

A tree is made once per job and kept for its restarts (the version is pinned). The leader's
worker (`workers/dataset_views.py`) builds it while the job waits, so that a big version holds
up no other job's start; `prepare`, on the controller's start path, builds only what is still
missing then. Both build with `storage/trees.py`: beside the final name, then renamed into
place, so a server that stops halfway leaves no tree that looks whole. Directories are 0555 and
the blobs 0444: an account other than the server's cannot change them, and a replica on the
server's own account sees the tree through a read-only mount (`runtime/hide_home.py`), a
container through a read-only volume and a pod through a read-only `subPath` of the shared volume.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mlyard.backends.base import DatasetMount
from mlyard.paths import Paths
from mlyard.server.services.datasets import job_inputs
from mlyard.server.store.db import Database
from mlyard.spec import DatasetInput, JobSpec, dataset_variable
from mlyard.storage import BlobStore
from mlyard.storage.trees import build


def mounts(paths: Paths, job_id: int, inputs: Iterable[DatasetInput]) -> tuple[DatasetMount, ...]:
    return tuple(DatasetMount(directory=item.directory, view=paths.dataset_view(job_id, item.name)) for item in inputs)


def variables(paths: Paths, job_id: int, spec: JobSpec) -> dict[str, str]:
    """`MLYARD_DATASET_<NAME>` of each input: its tree's absolute path, the same in every replica;
    and `MLYARD_OUTPUT_DIR` of a job that writes datasets."""
    found = {dataset_variable(item.name): str(paths.dataset_view(job_id, item.name)) for item in spec.datasets}
    if spec.outputs:
        found["MLYARD_OUTPUT_DIR"] = str(paths.output_directory(job_id))
    return found


def output_directories(paths: Paths, job_id: int, spec: JobSpec) -> tuple[Path, ...]:
    """The job's own directory its outputs are collected from (`workers/dataset_outputs.py`)."""
    return (paths.output_directory(job_id),) if spec.outputs else ()


def prepare(database: Database, blobs: BlobStore, paths: Paths, job_id: int, inputs: list[DatasetInput]) -> None:
    """Makes the trees of the job's inputs that are not there yet (the worker has usually made them)."""
    missing = [item for item in inputs if not paths.dataset_view(job_id, item.name).is_dir()]
    if not missing:
        return
    with database.reading() as session:
        versions = job_inputs.version_ids(session, missing)
        files = [job_inputs.files_of(session, version) for version in versions]
    for item, listed in zip(missing, files, strict=True):
        build(paths.dataset_view(job_id, item.name), listed, blobs)
