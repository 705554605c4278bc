"""What datasets and models share in the API: versions whose files are blobs of one
content-addressed store, pushed and pulled as whole directories.

A push hashes the files (`hash_cache.py` remembers unchanged ones); a directory that holds the
very files of the version it would follow (the same fingerprint) ends there. Otherwise it asks
the server which blobs it lacks, uploads only those (small files many to a request:
`blob_packs.py`), several requests at once, then the manifest, and the caller asks for a
version. An interrupted push loses only the files in flight: the next one finds the rest
uploaded. A pull writes each file beside its place and
renames it there once its sha256 is checked, skipping files that are already right."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from mlyard.client.hash_cache import HashCache, sha256_of

if TYPE_CHECKING:
    from mlyard.api.datasets import AliasInfo, VersionFile
    from mlyard.client import Client

PARALLEL_UPLOADS = 4
ASK_CHUNK = 5_000
_READ = 1024 * 1024
Progress = Callable[[int, int], None]
"""Told (files, bytes) each time a file, or a pack of small files, is done."""


@dataclass(frozen=True)
class LocalFile:
    path: str
    """Relative, with forward slashes."""
    source: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class PushPlan:
    files: list[LocalFile]
    missing: list[LocalFile]
    """Files whose bytes the server still needs."""
    skipped: list[str]
    """Links and special files, which a version does not hold."""
    unchanged: Any | None = None
    """The version the push would follow, when the directory holds its very files: nothing to send."""


class VersionedFiles:
    """The calls of a resource whose versions are files (`/datasets`, `/models`): a subclass
    sets `resource` and answers `version(project, name, version)` with something that has
    `.version` and `.fingerprint`."""

    resource = "datasets"

    def __init__(self, client: Client):
        self._client = client

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._client._request(method, path, **kwargs).json()

    def _path(self, project: str, name: str) -> str:
        return f"/{self.resource}/{project}/{name}"

    def version(self, project: str, name: str, version: str) -> Any:  # pragma: no cover - each resource's own
        raise NotImplementedError

    def files(self, project: str, name: str, version: str) -> Iterator[VersionFile]:
        """Every file of the version, in path order, read page by page."""
        from mlyard.api.datasets import VersionFiles
        after = None
        while True:
            params = {"limit": 10_000, **({"after": after} if after is not None else {})}
            page = VersionFiles.model_validate(self._json(
                "GET", f"{self._path(project, name)}/versions/{version}/files", params=params))
            yield from page.files
            if page.next_after is None:
                return
            after = page.next_after

    def aliases(self, project: str, name: str) -> list[AliasInfo]:
        from mlyard.api.datasets import AliasInfo
        found = self._json("GET", self._path(project, name) + "/aliases")
        return [AliasInfo.model_validate(item) for item in found]

    def set_alias(self, project: str, name: str, alias: str, version: str) -> AliasInfo:
        from mlyard.api.datasets import AliasInfo
        return AliasInfo.model_validate(self._json("PUT", f"{self._path(project, name)}/aliases/{alias}",
                                                   json={"version": version}))

    def remove_version(self, project: str, name: str, version: str) -> None:
        self._client._request("DELETE", f"{self._path(project, name)}/versions/{version}")

    def remove(self, project: str, name: str) -> None:
        """One with no version left."""
        self._client._request("DELETE", self._path(project, name))

    def missing(self, digests: list[str]) -> set[str]:
        missing: set[str] = set()
        for start in range(0, len(digests), ASK_CHUNK):
            answer = self._json("POST", "/blobs:missing", json={"digests": digests[start:start + ASK_CHUNK]})
            missing.update(answer["missing"])
        return missing

    def upload(self, digest: str, content: bytes | Path) -> None:
        """Sends one blob; retried on connection errors (a repeat stores nothing twice)."""
        if isinstance(content, bytes):
            self._client._request("PUT", f"/blobs/{digest}", content=content, retry=True)
            return
        with open(content, "rb") as handle:
            self._client._request("PUT", f"/blobs/{digest}", content=iter(lambda: handle.read(_READ), b""),
                                  retry=False, headers={"Content-Length": str(content.stat().st_size)})

    # ------------------------------------------------------------------ directories
    def plan_push(self, directory: Path, cache: HashCache | None, hashed: Progress | None = None, *,
                  parent: Any | None = None) -> PushPlan:
        """The files of `directory` with their hashes, and those the server lacks. Without a `cache`
        (a directory seen once, such as an unpacked archive) every file is hashed. A directory
        with the files of `parent` (the version the push would follow) asks the server nothing."""
        files, skipped = [], []
        # Walked from its resolved path: each file's key in the cache is then a string join, not a resolve.
        resolved = str(directory.resolve())
        prefix = len(resolved.rstrip("/")) + 1
        done = [0, 0]
        for root, folders, names in os.walk(resolved):
            folders.sort()
            for name in sorted(names):
                source = os.path.join(root, name)
                relative = source[prefix:]
                stat = os.lstat(source)
                if not S_ISREG(stat.st_mode):  # a link (to a file or not) or a special file: one stat, not three
                    skipped.append(relative)
                    continue
                digest = (cache.digest(Path(source), stat, resolved=source, under=resolved) if cache is not None
                          else sha256_of(Path(source)))
                files.append(LocalFile(relative, Path(source), digest, stat.st_size))
                done[0] += 1
                done[1] += stat.st_size
                if hashed is not None and (done[0] >= 256 or done[1] >= _READ):  # a progress bar redraws anyway
                    hashed(*done)
                    done = [0, 0]
        if hashed is not None and done[0]:
            hashed(*done)
        from mlyard.api.datasets import version_fingerprint
        if parent is not None and parent.fingerprint == version_fingerprint(
                (file.path, file.sha256) for file in files):
            return PushPlan(files=files, missing=[], skipped=skipped, unchanged=parent)
        needed = self.missing(sorted({file.sha256 for file in files}))
        first: dict[str, LocalFile] = {}
        for file in files:
            if file.sha256 in needed:
                first.setdefault(file.sha256, file)  # identical files travel once
        return PushPlan(files=files, missing=list(first.values()), skipped=skipped)

    def send(self, plan: PushPlan, uploaded: Progress | None = None) -> str:
        """Uploads what the server lacks of `plan`, then its manifest; the manifest's digest."""
        from mlyard.client.blob_packs import send_all

        send_all(self._client, self.upload, plan.missing, uploaded)  # small files many to a request
        manifest = json.dumps({"files": [{"path": file.path, "sha256": file.sha256, "size": file.size}
                                         for file in plan.files]}, separators=(",", ":")).encode()
        digest = hashlib.sha256(manifest).hexdigest()
        if self.missing([digest]):  # pushed before: a directory unchanged sends no byte
            self.upload(digest, manifest)
        return digest

    def pull(self, project: str, name: str, version: str, directory: Path,
             done: Progress | None = None) -> tuple[int, int]:
        """Writes the version's files under `directory`; (files written, files already right)."""
        pinned = self.version(project, name, version).version  # an alias that moves meanwhile changes nothing
        files = list(self.files(project, name, pinned))
        root = directory.resolve()

        def fetch(file: VersionFile) -> bool:
            target = (root / file.path).resolve()
            if not target.is_relative_to(root):  # the server checks paths; a client checks them again
                raise ValueError(f"the version lists {file.path!r}, which leads outside {directory}")
            if target.is_file() and target.stat().st_size == file.size and sha256_of(target) == file.sha256:
                if done is not None:
                    done(1, file.size)
                return False
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.mlyard-partial")
            hasher = hashlib.sha256()
            url, params = f"{self._path(project, name)}/versions/{pinned}/file", {"path": file.path}
            with self._client._http.stream("GET", url, params=params) as response, open(partial, "wb") as sink:
                if not response.is_success:
                    self._client._request("GET", url, params=params)  # raises the server's error as a ClientError
                for chunk in response.iter_bytes(_READ):
                    hasher.update(chunk)
                    sink.write(chunk)
            if hasher.hexdigest() != file.sha256:
                partial.unlink(missing_ok=True)
                raise ValueError(f"{file.path}: the bytes received do not match its sha256")
            os.replace(partial, target)
            if done is not None:
                done(1, file.size)
            return True

        with ThreadPoolExecutor(PARALLEL_UPLOADS) as pool:
            written = sum(pool.map(fetch, files))
        return written, len(files) - written
