"""An environment without a container engine: a virtualenv per content hash, on the Python
the server runs (the base image cannot apply; apt packages are refused).

`python -m venv` and `pip install` run with `build_policy.build_environment()` only (never
the server's variables), with pip options from the administrator's `BuildPolicy`, and, when
an account is given, as that account: it owns the virtualenv only while it is built, every
process it left is killed and every link leading out of the tree refused before the tree is
handed back to the server's account, and the server writes in it without following links.
A build on the server's own account runs where MLYARD_HOME shows only the virtualenv
(`runtime.hide_home`), so build code cannot read the server's token or database. Index
credentials never reach the log: URLs in it are `build_policy.redact`ed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from mlyard.api.environments import EnvironmentRequest
from mlyard.environments.build_policy import BuildPolicy, build_environment, redact
from mlyard.errors import MlyardError
from mlyard.runtime import hide_home

BUILD_TIMEOUT = 3600.0
REQUIREMENTS_FILE = "requirements.txt"


class BuildFailed(MlyardError):
    code = "build_failed"


@dataclass(frozen=True)
class BuildAccount:
    """The OS account a build runs as (not the server's)."""

    name: str
    uid: int
    gid: int


def _as_server() -> BuildAccount | None:
    return None


def _hand_over(top: Path, uid: int, gid: int) -> None:
    """Makes `top` and everything below it belong to uid:gid, never following a link."""
    os.lchown(top, uid, gid)
    for directory, subdirectories, files in os.walk(top):
        for name in subdirectories + files:
            os.lchown(os.path.join(directory, name), uid, gid)


def _escaping_links(top: Path) -> list[str]:
    """The links under `top` that lead out of it, but the interpreter links `venv` makes in `bin/`."""
    found = []
    for directory, subdirectories, files in os.walk(top):
        for name in subdirectories + files:
            path = Path(directory, name)
            if not path.is_symlink():
                continue
            inside = Path(os.path.realpath(path)).is_relative_to(os.path.realpath(top))
            if not inside and not (path.parent == top / "bin" and name.startswith("python")):
                found.append(f"{path.relative_to(top)} -> {os.readlink(path)}")
    return found


def _write_new(path: Path, text: str) -> None:
    """Writes `path` afresh: whatever the build left there (a link to a file of the server's)
    is removed, never followed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def _kill_leftovers(account: BuildAccount) -> None:
    """A build may leave processes behind (a source build's daemon); none may outlive it."""
    for process in psutil.process_iter(["uids"]):
        try:
            if process.info["uids"] is not None and account.uid in process.info["uids"]:
                process.kill()
        except psutil.Error:
            pass


class VirtualenvBuilder:
    """Virtualenvs under `root/<hash>`. A virtualenv's scripts name its directory, so it is
    built where it stays, and counts as built once `COMPLETE` is written last."""

    kind = "virtualenv"
    COMPLETE = ".mlyard-complete"

    def __init__(self, root: Path, python: str = sys.executable, policy: BuildPolicy | None = None,
                 account: Callable[[], BuildAccount | None] = _as_server, hide: Path | None = None):
        """`account`: the account builds run as (None: the server's own); it raises
        `BuildFailed` saying why when builds cannot run safely here. `hide`: the directory
        (MLYARD_HOME) a build on the server's own account must not see, but its virtualenv."""
        self.root = root
        self.python = python
        self.policy = policy or BuildPolicy()
        self.account = account
        self.hide = hide

    def path_for(self, content_hash: str) -> Path:
        return self.root / content_hash

    def exists(self, content_hash: str) -> bool:
        marker = self.path_for(content_hash) / self.COMPLETE
        return marker.is_file() and not marker.is_symlink()

    def build(self, request: EnvironmentRequest, content_hash: str, log: Callable[[str], None]) -> str:
        """Builds the virtualenv (unless it exists); returns its directory."""
        if request.apt:
            raise BuildFailed(f"apt packages ({', '.join(request.apt)}) need a container engine; this server "
                              "builds environments as virtualenvs")
        target = self.path_for(content_hash)
        if self.exists(content_hash):
            return str(target)
        account = self.account()
        shutil.rmtree(target, ignore_errors=True)  # an earlier build that did not finish
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        home = Path(tempfile.mkdtemp(prefix="mlyard-build-"))
        try:
            target.mkdir(mode=0o755)
            if account is not None:
                for owned in (target, home):
                    os.chown(owned, account.uid, account.gid)
            self._run([self.python, "-m", "venv", str(target)], log, account, home, target)
            if request.requirements:
                requirements = home / REQUIREMENTS_FILE
                requirements.write_text(request.requirements + "\n")
                os.chmod(requirements, 0o644)
                self._run([str(target / "bin" / "python"), "-m", "pip", "install", *self.policy.pip_options(),
                           "-r", str(requirements)], log, account, home, target)
            if account is not None:
                _kill_leftovers(account)
                escaping = _escaping_links(target)
                if escaping:
                    raise BuildFailed(f"the build left links that lead out of the environment: "
                                      f"{', '.join(escaping[:5])}")
                _hand_over(target, os.geteuid(), os.getegid())
            _write_new(target / self.COMPLETE, content_hash + "\n")
        except BaseException:
            if account is not None:
                _kill_leftovers(account)
            shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return str(target)

    def _run(self, argv: list[str], log: Callable[[str], None], account: BuildAccount | None, home: Path,
             target: Path) -> None:
        log(redact("$ " + " ".join(argv)))
        switch = {} if account is None else {"user": account.uid, "group": account.gid, "extra_groups": []}
        command = argv
        if account is None and self.hide is not None:
            # The build's home and requirements are under /tmp, outside the hidden directory.
            command = hide_home.arguments(self.hide, [target], [], argv)
        # umask 022: the environment is read by jobs, which may run under accounts of their own.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL, umask=0o022, env=build_environment(str(home)),
                              cwd=home, start_new_session=True, **switch) as process:
            assert process.stdout is not None
            for line in process.stdout:
                log(line.rstrip("\n"))
            code = process.wait(timeout=BUILD_TIMEOUT)
        if code != 0:
            shown = " ".join(Path(part).name if index == 0 else part for index, part in enumerate(argv))
            raise BuildFailed(redact(f"`{shown}` failed with exit code {code}"))

    def remove(self, content_hash: str) -> None:
        shutil.rmtree(self.path_for(content_hash), ignore_errors=True)

    def tag_for(self, content_hash: str) -> str:
        return str(self.path_for(content_hash))

    def collect(self, used: set[str]) -> None:
        for directory in self.root.iterdir() if self.root.is_dir() else ():
            if directory.name != "logs" and directory.name not in used and directory.is_dir():
                self.remove(directory.name)
