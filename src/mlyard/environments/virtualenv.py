"""An environment without a container engine: a virtualenv per content hash, on the Python
the server runs (the base image cannot apply; apt packages are refused)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from mlyard.api.environments import EnvironmentRequest
from mlyard.errors import MlyardError

BUILD_TIMEOUT = 3600.0


class BuildFailed(MlyardError):
    code = "build_failed"


class VirtualenvBuilder:
    """Virtualenvs under `root/<hash>`. A virtualenv's scripts name its directory, so it is
    built where it stays, and counts as built once `COMPLETE` is written last."""

    kind = "virtualenv"
    COMPLETE = ".mlyard-complete"

    def __init__(self, root: Path, python: str = sys.executable):
        self.root = root
        self.python = python

    def path_for(self, content_hash: str) -> Path:
        return self.root / content_hash

    def exists(self, content_hash: str) -> bool:
        return (self.path_for(content_hash) / self.COMPLETE).exists()

    def build(self, request: EnvironmentRequest, content_hash: str, log: Callable[[str], None]) -> str:
        """Builds the virtualenv (unless it exists); returns its directory."""
        if request.apt:
            raise BuildFailed(f"apt packages ({', '.join(request.apt)}) need a container engine; this server "
                              "builds environments as virtualenvs")
        target = self.path_for(content_hash)
        if self.exists(content_hash):
            return str(target)
        shutil.rmtree(target, ignore_errors=True)  # an earlier build that did not finish
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        try:
            self._run([self.python, "-m", "venv", str(target)], log)
            if request.requirements:
                requirements = target / "mlyard-requirements.txt"
                requirements.write_text(request.requirements + "\n")
                self._run([str(target / "bin" / "python"), "-m", "pip", "install", "--no-input",
                           "--disable-pip-version-check", "-r", str(requirements)], log)
            (target / self.COMPLETE).write_text(content_hash + "\n")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return str(target)

    @staticmethod
    def _run(argv: list[str], log: Callable[[str], None]) -> None:
        log("$ " + " ".join(argv))
        # umask 022: the environment is read by jobs, which may run under accounts of their own.
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL, umask=0o022) as process:
            assert process.stdout is not None
            for line in process.stdout:
                log(line.rstrip("\n"))
            code = process.wait(timeout=BUILD_TIMEOUT)
        if code != 0:
            raise BuildFailed(f"`{' '.join(Path(part).name if index == 0 else part for index, part in enumerate(argv))}` "
                              f"failed with exit code {code}")

    def remove(self, content_hash: str) -> None:
        shutil.rmtree(self.path_for(content_hash), ignore_errors=True)

    def tag_for(self, content_hash: str) -> str:
        return str(self.path_for(content_hash))

    def collect(self, used: set[str]) -> None:
        for directory in self.root.iterdir() if self.root.is_dir() else ():
            if directory.name != "logs" and directory.name not in used and directory.is_dir():
                self.remove(directory.name)
