"""The sha256 of local files, remembered by path, size, modification time and inode (as DVC
does), so that pushing an unchanged directory again reads none of its bytes. Kept in a SQLite
file (the CLI puts it in MLYARD_CONFIG_DIR, else the user's cache folder); a file that changed in
any of those is hashed again."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

_READ = 1024 * 1024


def sha256_of(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_READ):
            hasher.update(chunk)
    return hasher.hexdigest()


class HashCache:
    def __init__(self, file: Path):
        file.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(file, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS hashes (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, "
                         "inode INTEGER, sha256 TEXT)")
        self._pending: list[tuple] = []

    def digest(self, path: Path, stat: os.stat_result) -> str:
        """The file's sha256, read again only when its size, time or inode changed."""
        key = str(path.resolve())
        row = self._db.execute("SELECT size, mtime_ns, inode, sha256 FROM hashes WHERE path = ?", (key,)).fetchone()
        if row is not None and tuple(row[:3]) == (stat.st_size, stat.st_mtime_ns, stat.st_ino):
            return row[3]
        digest = sha256_of(path)
        self._pending.append((key, stat.st_size, stat.st_mtime_ns, stat.st_ino, digest))
        return digest

    def __enter__(self) -> HashCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?)", self._pending)
        self._db.close()
