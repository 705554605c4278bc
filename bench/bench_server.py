"""A throwaway mlyard server for the benches that run real jobs through it: its own
MLYARD_HOME under a scratch directory, a free port, the repository uploaded as the jobs' code."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class BenchServer:
    """`settings`: MLYARD_* variables on top of a home of its own and jobs on the bench's account.
    `snapshot` is the digest of the uploaded repository."""

    def __init__(self, scratch: Path, **settings: str):
        from mlyard.client import Client
        from mlyard.storage import pack_directory

        self.home = scratch / "home"
        port = free_port()
        self.environment = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
        self.environment.update({"MLYARD_HOME": str(self.home), "MLYARD_PORT": str(port), "MLYARD_JOB_USERS": "off",
                                 "MLYARD_CONFIG_DIR": str(scratch / "cli"), **settings})
        subprocess.run([str(BIN / "mlyard"), "server", "start"], env=self.environment, check=True)
        self.client = Client(f"http://127.0.0.1:{port}", (self.home / "admin.token").read_text().strip())
        packed = pack_directory(REPOSITORY, scratch / "code.tar.gz")
        self.client.upload_snapshot(packed.path, packed.digest)
        self.snapshot = packed.digest

    def close(self) -> None:
        self.client.close()
        subprocess.run([str(BIN / "mlyard"), "server", "stop"], env=self.environment, check=False)
