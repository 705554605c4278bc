"""Where mlyard keeps its data (the home directory's layout), and the server's default address.

`MLYARD_HOME` (default `~/.mlyard`) holds, in embedded mode:
`mlyard.db` (SQLite), `blobs/` (content-addressed snapshots), `runs/<job>/<attempt>/<replica>/`
(launcher config, logs, exit status), `checkpoints/<job>/`, `tensorboard/<job>/`,
`dataset-views/<job>/<dataset>/` (the versions a job reads, as hard links into `blobs/`),
`outputs/<job>/` (what a job writes into datasets), `admin.token`
(0600), and the server's `server.pid`, `server.log` and `server.json` (its URL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


def home_directory() -> Path:
    return Path(os.environ.get("MLYARD_HOME") or Path.home() / ".mlyard").expanduser().resolve()


@dataclass(frozen=True)
class Paths:
    home: Path

    @property
    def database(self) -> Path:
        return self.home / "mlyard.db"

    @property
    def blobs(self) -> Path:
        return self.home / "blobs"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def checkpoints(self) -> Path:
        return self.home / "checkpoints"

    @property
    def admin_token(self) -> Path:
        return self.home / "admin.token"

    @property
    def server_pid(self) -> Path:
        return self.home / "server.pid"

    @property
    def server_log(self) -> Path:
        return self.home / "server.log"

    @property
    def server_info(self) -> Path:
        return self.home / "server.json"

    def replica_directory(self, job_id: int, attempt: int, replica: str) -> Path:
        return self.runs / str(job_id) / str(attempt) / replica

    def checkpoint_directory(self, job_id: int) -> Path:
        return self.checkpoints / str(job_id)

    @property
    def tensorboard(self) -> Path:
        return self.home / "tensorboard"

    def tensorboard_directory(self, job_id: int) -> Path:
        return self.tensorboard / str(job_id)

    def output_directory(self, job_id: int) -> Path:
        """`MLYARD_OUTPUT_DIR` of a job that writes datasets (`workers/dataset_outputs.py`)."""
        return self.home / "outputs" / str(job_id)

    @property
    def volumes(self) -> Path:
        """The local backend's volumes, one directory per claim (`backends/local/volumes.py`)."""
        return self.home / "volumes"

    @property
    def dataset_views(self) -> Path:
        return self.home / "dataset-views"

    def dataset_view(self, job_id: int, dataset: str) -> Path:
        """The read-only tree of the version a job reads of `dataset` (`control/dataset_views.py`)."""
        return self.dataset_views / str(job_id) / dataset

    @property
    def environments(self) -> Path:
        """Virtualenvs of environments, by content hash, and `logs/` of their builds."""
        return self.home / "environments"

    def environment_log(self, name: str) -> Path:
        return self.environments / "logs" / f"{name}.log"
