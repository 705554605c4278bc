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
        self._known: dict[str, tuple] = {}
        self._loaded: set[str] = set()

    def _load(self, folder: str) -> None:
        """Everything remembered under `folder` (a resolved path), in one query: a directory of
        10,000 files is one range read of the index, not 10,000 lookups."""
        if folder in self._loaded:
            return
        self._loaded.add(folder)
        low = folder.rstrip("/") + "/"
        high = low[:-1] + chr(ord("/") + 1)  # every path that starts with `low` sorts below it
        self._known.update((row[0], row[1:]) for row in self._db.execute(
            "SELECT path, size, mtime_ns, inode, sha256 FROM hashes WHERE path >= ? AND path < ?", (low, high)))

    def digest(self, path: Path, stat: os.stat_result, *, resolved: str | None = None,
               under: str | None = None) -> str:
        """The file's sha256, read again only when its size, time or inode changed. `resolved`:
        the path resolved already (a walk of a resolved folder knows it), found among what was
        remembered `under` that folder."""
        key = resolved if resolved is not None else str(path.resolve())
        if under is not None:
            self._load(under)
            row = self._known.get(key)
        else:
            row = self._db.execute("SELECT size, mtime_ns, inode, sha256 FROM hashes WHERE path = ?",
                                   (key,)).fetchone()
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
