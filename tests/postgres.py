"""A throwaway PostgreSQL cluster for the test session, and a fresh database per test.

The cluster is started from the server binaries of the machine (Debian's `postgresql`
package puts them in /usr/lib/postgresql/<version>/bin), on a free port, with fsync off: a
crash loses nothing a test needs. It starts on first use, so a run of pure tests never pays
for it, and stops (`pg_ctl stop -m immediate`) when the session ends.

Without the binaries, PostgreSQL tests are skipped with the reason, unless
MLYARD_REQUIRE_POSTGRES=1 (CI), where a missing database must not pass unnoticed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

REQUIRE_VARIABLE = "MLYARD_REQUIRE_POSTGRES"
SUPERUSER = "mlyard"
# initdb refuses to run as root; this is the account the Debian package creates for it.
ROOT_RUNS_AS = "postgres"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def find_binaries() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with initdb, else an initdb on PATH."""

    def version(path: str) -> tuple[int, ...]:
        number = Path(path).parent.parent.name
        return tuple(int(part) for part in number.split(".") if part.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"PostgreSQL is required ({REQUIRE_VARIABLE}=1) but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


class PostgresCluster:
    def __init__(self, binaries: Path):
        self.binaries = binaries
        self.root = Path(tempfile.mkdtemp(prefix="mlyard-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = 0
        self.owner: str | None = None
        if os.geteuid() == 0:
            self.owner = ROOT_RUNS_AS
            account = pwd.getpwnam(ROOT_RUNS_AS)
            os.chown(self.root, account.pw_uid, account.pw_gid)

    def _run(self, *command: str | Path) -> None:
        argv = [str(part) for part in command]
        if self.owner is not None:
            argv = ["su", self.owner, "-s", "/bin/sh", "-c", shlex.join(argv)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=self.root, check=False)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}{result.stderr}{log}")

    def start(self) -> None:
        self._run(self.binaries / "initdb", "-D", self.data, "-A", "trust", "-U", SUPERUSER, "--no-sync",
                  "-E", "UTF8", "--locale", "C")
        for attempt in range(3):  # the free port may be taken by someone else before postgres binds it
            self.port = _free_port()
            try:
                self._run(self.binaries / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o",
                          f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off "
                          "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200", "start")
                return
            except RuntimeError:
                if attempt == 2:
                    raise

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(self.binaries / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "mlyard") -> str:
        """A new empty database; its URL."""
        import psycopg
        from psycopg import sql

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)


_cluster: PostgresCluster | None = None
_failure: str | None = None


def cluster() -> PostgresCluster:
    """The session's cluster, started on first use; skips (or fails) the test without one."""
    global _cluster, _failure
    if _cluster is not None:
        return _cluster
    if _failure is None:
        binaries = find_binaries()
        if binaries is None:
            _failure = ("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb); "
                        "install the `postgresql` package")
        elif os.geteuid() == 0 and not _account_exists(ROOT_RUNS_AS):
            _failure = f"running as root, and there is no {ROOT_RUNS_AS!r} account to run initdb as"
        else:
            started = PostgresCluster(binaries)
            try:
                started.start()
                _cluster = started
                return started
            except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
                started.stop()
                _failure = f"the test cluster did not start: {error}"
    unavailable(_failure)


def _account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def create_database() -> str:
    """The URL of a fresh, empty database in the session's cluster."""
    return cluster().create_database()


def stop_cluster() -> None:
    global _cluster
    if _cluster is not None:
        stopping, _cluster = _cluster, None
        stopping.stop()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    yield cluster()
    stop_cluster()
