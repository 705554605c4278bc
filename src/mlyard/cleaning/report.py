"""The cleaning report of a version's files (see docs/architecture.md, "Cleaning reports").

Files are known by the version's list (path, sha256, size), never by walking the root: what is
read is what the version holds, opened beneath the root (`files.open_beneath`). Identical bytes
are decoded and hashed once, whatever number of paths hold them.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlyard.cleaning import images
from mlyard.cleaning.extras import CleaningError
from mlyard.cleaning.files import check_path, read_bounded
from mlyard.cleaning.groups import UnionFind
from mlyard.cleaning.labels import MAX_LABEL_FILE_BYTES, file_labels, is_image, split_kind, split_of

FORMAT = 1
DEFAULT_DISTANCE = 6
PROGRESS_EVERY = 500
_SHA256 = re.compile(r"[0-9a-f]{64}")

Progress = Callable[[str, int, int], None]


@dataclass
class _Version:
    """The files by index, and what the checks learned of them."""
    paths: list[str]
    digests: list[str]
    sizes: list[int]
    labels: dict[str, str] = field(default_factory=dict)
    examined: dict[str, images.Examined] = field(default_factory=dict)  # by digest

    def image_indices(self) -> list[int]:
        return [index for index, path in enumerate(self.paths) if is_image(path) and self.sizes[index] > 0]


def build_report(root: Path, files: list[tuple[str, str, int]], *, distance: int = DEFAULT_DISTANCE,
                 predictions: Path | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """The report of the files (path, sha256, size) under `root`; see the module's documentation."""
    if isinstance(distance, bool) or not isinstance(distance, int) or not 0 <= distance <= 64:
        raise CleaningError(f"the distance is a number of bits, 0 to 64: {distance!r}")
    version = _version(files)
    sizes = dict(zip(version.paths, version.sizes))
    source, version.labels = file_labels(version.paths, lambda path: _read_table(root, path, sizes[path]))
    _examine(root, version, progress)
    exact = _exact_groups(version)
    groups, leaks = _near(version, distance, progress)
    issues = None
    if predictions is not None:
        if not version.labels:
            raise CleaningError("predictions were given, but the version's files carry no labels")
        from mlyard.cleaning.predictions import label_issues
        issues = label_issues(version.labels, predictions)
    near = [_near_entry(version, group) for group in groups if len({version.digests[i] for i in group}) > 1]
    report = {
        "format": FORMAT, "files": len(version.paths), "images": sum(map(is_image, version.paths)),
        "distance": distance, "labels_source": source,
        "exact_duplicates": exact,
        "near_duplicates": sorted(near, key=lambda entry: entry["paths"]),
        "leaks": leaks,
        "corrupt": _corrupt(version),
        "empty": sorted(path for path, size in zip(version.paths, version.sizes) if size == 0),
        "wrong_extension": _wrong_extensions(version),
        "label_conflicts": _conflicts(version, groups),
        "class_balance": dict(Counter(version.labels.values()).most_common()),
        "label_issues": issues,
    }
    report["summary"] = summary(report)
    return report


def summary(report: dict[str, Any]) -> dict[str, int | None]:
    issues = report["label_issues"]
    return {
        "exact_duplicates": len(report["exact_duplicates"]),
        "duplicate_files": sum(len(group["paths"]) - 1 for group in report["exact_duplicates"]),
        "near_duplicates": len(report["near_duplicates"]),
        "leaks": len(report["leaks"]),
        "corrupt": len(report["corrupt"]),
        "empty": len(report["empty"]),
        "wrong_extension": len(report["wrong_extension"]),
        "label_conflicts": len(report["label_conflicts"]),
        "label_issues": None if issues is None else len(issues),
    }


def _version(files: Iterable[tuple[str, str, int]]) -> _Version:
    """The files sorted by path, checked as a manifest's are; CleaningError naming the first wrong one."""
    seen: dict[str, tuple[str, int]] = {}
    for entry in files:
        try:
            path, digest, size = entry
        except (TypeError, ValueError):
            raise CleaningError(f"a file is (path, sha256, size): {entry!r:.100}") from None
        if not isinstance(path, str):
            raise CleaningError(f"a path is text: {path!r:.100}")
        check_path(path)
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest.lower()):
            raise CleaningError(f"{path!r}: not a sha256: {digest!r:.100}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise CleaningError(f"{path!r}: not a size: {size!r:.100}")
        if path in seen:
            raise CleaningError(f"{path!r} is listed twice")
        seen[path] = (digest.lower(), size)
    paths = sorted(seen)
    return _Version(paths, [seen[path][0] for path in paths], [seen[path][1] for path in paths])


def _read_table(root: Path, path: str, size: int) -> bytes | None:
    return read_bounded(root, path, MAX_LABEL_FILE_BYTES) if size <= MAX_LABEL_FILE_BYTES else None


def _examine(root: Path, version: _Version, progress: Progress | None) -> None:
    """Decodes and hashes each image's bytes once (the first path holding them)."""
    first: dict[str, str] = {}
    for index in version.image_indices():
        first.setdefault(version.digests[index], version.paths[index])
    for done, (digest, path) in enumerate(first.items(), 1):
        version.examined[digest] = images.examine(root, path)
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == len(first)):
            progress("hashing", done, len(first))


def _exact_groups(version: _Version) -> list[dict[str, Any]]:
    """Files of the same bytes (empty files aside: they are listed as empty)."""
    holders: dict[str, list[str]] = defaultdict(list)
    for path, digest, size in zip(version.paths, version.digests, version.sizes):
        if size > 0:
            holders[digest].append(path)
    groups = [{"sha256": digest, "paths": paths} for digest, paths in holders.items() if len(paths) > 1]
    return sorted(groups, key=lambda group: group["paths"][0])


def _near(version: _Version, distance: int, progress: Progress | None) -> tuple[list[list[int]], list[dict]]:
    """Groups of files joined by the same bytes or perceptual hashes within `distance` (file
    indices, more than one a group), and the pairs of them that cross splits."""
    joined = UnionFind(len(version.paths))
    by_digest: dict[str, list[int]] = defaultdict(list)
    by_hash: dict[int, list[int]] = defaultdict(list)
    for index, (digest, size) in enumerate(zip(version.digests, version.sizes)):
        if size > 0:
            by_digest[digest].append(index)
    for index in version.image_indices():
        examined = version.examined.get(version.digests[index])
        if examined is not None and examined.phash is not None:
            by_hash[examined.phash].append(index)
    for members in (*by_digest.values(), *by_hash.values()):
        for other in members[1:]:
            joined.union(members[0], other)
    hashes = list(by_hash)
    neighbours: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for first, second, apart in _near_pairs(hashes, distance, progress):
        joined.union(by_hash[hashes[first]][0], by_hash[hashes[second]][0])
        neighbours[hashes[first]].append((hashes[second], apart))
        neighbours[hashes[second]].append((hashes[first], apart))
    return joined.groups(), _leaks(version, by_digest, by_hash, neighbours)


def _near_pairs(hashes: list[int], distance: int, progress: Progress | None) -> list[tuple[int, int, int]]:
    if len(hashes) < 2:
        return []
    from mlyard.cleaning.near import near_pairs  # numpy's, which only images need
    return near_pairs(hashes, distance, progress)


def _leaks(version: _Version, by_digest: dict[str, list[int]], by_hash: dict[int, list[int]],
           neighbours: dict[int, list[tuple[int, int]]]) -> list[dict[str, Any]]:
    """For each file outside `train` with a copy or near copy in another split, the pair with
    its nearest such file: every leaked evaluation file once, never every pair of a big group."""
    kinds = [split_kind(path) for path in version.paths]
    nearest_of_digest = {digest: _nearest_by_kind(version, kinds, members) for digest, members in by_digest.items()}
    nearest_of_hash = {value: _nearest_by_kind(version, kinds, members) for value, members in by_hash.items()}
    hash_of = {index: value for value, members in by_hash.items() for index in members}
    pairs: dict[tuple[str, str], int] = {}
    for index, kind in enumerate(kinds):
        if kind is None or kind == "train" or version.sizes[index] == 0:
            continue
        candidates = [(0, nearest_of_digest[version.digests[index]])]
        if index in hash_of:
            value = hash_of[index]
            candidates.append((0, nearest_of_hash[value]))
            candidates.extend((apart, nearest_of_hash[other]) for other, apart in neighbours.get(value, ()))
        found = [(apart, path) for apart, nearest in candidates for other_kind, path in nearest.items()
                 if other_kind != kind]
        if found:
            apart, path = min(found)
            pair = tuple(sorted((version.paths[index], path)))
            pairs[pair] = min(apart, pairs.get(pair, apart))
    return [{"paths": list(pair), "distance": apart} for pair, apart in sorted(pairs.items())]


def _nearest_by_kind(version: _Version, kinds: list[str | None], members: list[int]) -> dict[str, str]:
    """The first path of each split among `members` (paths are sorted, so the first is the least)."""
    nearest: dict[str, str] = {}
    for index in members:
        if kinds[index] is not None:
            nearest.setdefault(kinds[index], version.paths[index])
    return nearest


def _near_entry(version: _Version, group: list[int]) -> dict[str, Any]:
    paths = [version.paths[index] for index in group]
    kinds = {split_kind(path) for path in paths} - {None}
    return {"paths": paths, "splits": sorted({split_of(path) for path in paths} - {None}), "leak": len(kinds) > 1}


def _corrupt(version: _Version) -> list[dict[str, str]]:
    return [{"path": version.paths[index], "problem": problem} for index in version.image_indices()
            if (problem := version.examined[version.digests[index]].problem) is not None]


def _wrong_extensions(version: _Version) -> list[dict[str, str]]:
    wrong = []
    for index in version.image_indices():
        path, examined = version.paths[index], version.examined[version.digests[index]]
        extension = images.wrong_extension(path, examined.format)
        if extension is not None:
            wrong.append({"path": path, "extension": extension, "format": examined.format})
    return wrong


def _conflicts(version: _Version, groups: list[list[int]]) -> list[dict[str, Any]]:
    """Groups of copies and near copies whose files carry more than one label."""
    conflicts = []
    for group in groups:
        paths = [version.paths[index] for index in group]
        labels = {path: version.labels[path] for path in paths if path in version.labels}
        if len(set(labels.values())) > 1:
            conflicts.append({"paths": paths, "labels": labels})
    return sorted(conflicts, key=lambda conflict: conflict["paths"])
