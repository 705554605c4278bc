"""A version's manifest: the JSON a client uploads as a blob, listing each file's relative
path, sha256 and size. Every path is checked here, since a replica will see these files under
its working directory: relative, normalized, no `..`, no NUL or backslash, no file that is also
another's folder. And the statistics of a version, read from its blobs (image headers only)."""

from __future__ import annotations

import json
import mimetypes
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mlyard.api.datasets import DIGEST_PATTERN, MAX_FILES, MAX_PATH_LENGTH, version_fingerprint
from mlyard.errors import InvalidRequest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from mlyard.server.services.datasets import labels

_DIGEST = re.compile(DIGEST_PATTERN)
MAX_IMAGES_READ = 20_000
"""Images whose headers the statistics read; past that, the figures say they are a sample."""
TOP_SIZES = 20
_INSERT_CHUNK = 1_000


@dataclass(frozen=True)
class Entry:
    path: str
    digest: str
    size: int
    media_type: str | None


def _problem(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "is not a non-empty string"
    if len(path) > MAX_PATH_LENGTH:
        return f"is longer than {MAX_PATH_LENGTH} characters"
    if "\x00" in path or "\\" in path:
        return "holds a NUL or a backslash"
    if path.startswith("/"):
        return "is absolute; paths are relative to the version's root"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "is not normalized (an empty, '.' or '..' part)"
    return None


def _slashes(path: str) -> Iterator[int]:
    """Where each folder of a normalized relative path ends (`a/b/c`: 1, 3)."""
    end = path.find("/")
    while end != -1:
        yield end
        end = path.find("/", end + 1)


def parse(content: bytes) -> list[Entry]:
    """The entries of a manifest, sorted by path; an InvalidRequest on `manifest` naming the
    first entry that is wrong."""
    try:
        document = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidRequest(f"the manifest is not JSON: {error}", field="manifest") from error
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, list):
        raise InvalidRequest('the manifest is not {"files": [...]}', field="manifest")
    if len(files) > MAX_FILES:
        raise InvalidRequest(f"the manifest lists {len(files):,} files; a version holds at most {MAX_FILES:,}",
                             field="manifest")
    entries: dict[str, Entry] = {}
    for index, item in enumerate(files):
        where = f"manifest files.{index}"
        if not isinstance(item, dict) or set(item) != {"path", "sha256", "size"}:
            raise InvalidRequest(f"{where} is not {{path, sha256, size}}", field="manifest")
        path, digest, size = item["path"], item["sha256"], item["size"]
        problem = _problem(path)
        if problem is not None:
            raise InvalidRequest(f"{where}: path {str(path)[:80]!r} {problem}", field="manifest")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise InvalidRequest(f"{where}: sha256 is not 64 lowercase hex digits", field="manifest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidRequest(f"{where}: size is not a whole number of bytes", field="manifest")
        if path in entries:
            raise InvalidRequest(f"{where}: path {path!r} is listed twice", field="manifest")
        entries[path] = Entry(path=path, digest=digest, size=size, media_type=mimetypes.guess_type(path)[0])
    folders = {path[:end] for path in entries for end in _slashes(path)}
    clash = sorted(folders & entries.keys())
    if clash:
        raise InvalidRequest(f"the manifest lists {clash[0]!r} as a file and as a folder of others",
                             field="manifest")
    return [entries[path] for path in sorted(entries)]


def insert_files(session: Session, row: type, version_id: int, entries: list[Entry]) -> None:
    """One `row` (a version's file: version_id, path, digest, size, media_type) per entry, a
    thousand to a statement."""
    values = [{"version_id": version_id, "path": entry.path, "digest": entry.digest, "size": entry.size,
               "media_type": entry.media_type} for entry in entries]
    for start in range(0, len(values), _INSERT_CHUNK):
        session.execute(insert(row.__table__), values[start:start + _INSERT_CHUNK])


def fingerprint(entries: list[tuple[str, str]]) -> str:
    """The sha256 of the sorted (path, digest) pairs: equal for versions with the same files."""
    return version_fingerprint(entries)


def statistics(entries: list[Entry], blob_path) -> dict:
    """Counts by top-level folder and media type, image formats and sizes read from the blobs'
    headers (Pillow opens an image lazily: the pixels are not decoded), and label counts where
    the files carry labels (`labels.py`). `blob_path`: digest → its file."""
    folders: dict[str, dict[str, int]] = {}
    for entry in entries:
        top = entry.path.split("/", 1)[0] if "/" in entry.path else "."
        figures = folders.setdefault(top, {"files": 0, "bytes": 0})
        figures["files"] += 1
        figures["bytes"] += entry.size
    kinds = Counter(entry.media_type or "unknown" for entry in entries)
    images = [entry for entry in entries if (entry.media_type or "").startswith("image/")]
    formats: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    unreadable = 0
    for entry in images[:MAX_IMAGES_READ]:
        read = image_header(blob_path(entry.digest))
        if read is None:
            unreadable += 1
            continue
        formats[read[0]] += 1
        sizes[f"{read[1]}x{read[2]}"] += 1
    figures = {"files": len(entries), "bytes": sum(entry.size for entry in entries), "folders": folders,
               "media_types": dict(kinds.most_common())}
    if images:
        figures["images"] = {"count": len(images), "read": min(len(images), MAX_IMAGES_READ),
                             "unreadable": unreadable, "formats": dict(formats.most_common()),
                             "sizes": dict(sizes.most_common(TOP_SIZES))}
    if (labelled := labels.label_counts(entries, blob_path)) is not None:
        figures["labels"] = labelled
    return figures


def image_header(path: Path) -> tuple[str, int, int] | None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return str(image.format), image.width, image.height
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError):
        return None
