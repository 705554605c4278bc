"""Label counts of a version, where its files carry labels, in the first of these forms found:
- a labels table at the top level (`labels.csv`, `labels.tsv`, `annotations.csv`, …): a header
  row with a column of file names (path, file, filename, image, …) and one of labels (label,
  class, category, target), as Kaggle's and most hand-made datasets give them;
- COCO annotations: a JSON file holding `images`, `annotations` and `categories` (each
  annotation counts for its category's name), as COCO, CVAT and Label Studio export them;
- image folders: images at `CLASS/file` or `SPLIT/CLASS/file` (SPLIT one of train, val, test, …),
  as torchvision's ImageFolder and Keras' `image_dataset_from_directory` read them.

The files are the pushers' and may be anything: a table or JSON file is read only up to
`MAX_LABEL_FILE_BYTES`, parsed as data (csv, json), and a label is a short string; what cannot
be read gives no labels rather than an error, as a version is valid whatever its files hold.
Tables and image folders are parsed by `mlyard.cleaning.labels`, which the cleaning reports use.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

# Tables and folders are read as the cleaning reports read them, so both see the same labels.
from mlyard.cleaning.labels import MAX_LABEL_FILE_BYTES, clean_label, folder_classes, labels_tables

MAX_LABELS_SHOWN = 1_000


class LabelledFile(Protocol):
    path: str
    digest: str
    size: int
    media_type: str | None


def label_counts(entries: list[LabelledFile], blob_path: Callable[[str], Path]) -> dict[str, Any] | None:
    """`{"source": …, "counts": {label: files or annotations}}` (most first), with `splits` for
    image folders; None where the version carries no labels."""
    for finder in (_from_table, _from_coco, _from_folders):
        found = finder(entries, blob_path)
        if found is not None and found["counts"]:
            found["counts"] = dict(Counter(found["counts"]).most_common(MAX_LABELS_SHOWN))
            return found
    return None


def _read(entry: LabelledFile, blob_path: Callable[[str], Path]) -> bytes | None:
    if entry.size > MAX_LABEL_FILE_BYTES:
        return None
    try:
        return blob_path(entry.digest).read_bytes()
    except OSError:
        return None


def _from_table(entries: list[LabelledFile], blob_path: Callable[[str], Path]) -> dict[str, Any] | None:
    by_path = {entry.path: entry for entry in entries}
    for path, counts in labels_tables(by_path, lambda path: _read(by_path[path], blob_path),
                                      lambda _path, rows: Counter(label for _file, label in rows)):
        return {"source": f"table {path}", "counts": counts}
    return None


def _from_coco(entries: list[LabelledFile], blob_path: Callable[[str], Path]) -> dict[str, Any] | None:
    for entry in entries:
        if not entry.path.lower().endswith(".json"):
            continue
        content = _read(entry, blob_path)
        try:
            document = json.loads(content) if content is not None else None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(document, dict) or not all(
                isinstance(document.get(key), list) for key in ("images", "annotations", "categories")):
            continue
        names = {category.get("id"): clean_label(category.get("name")) for category in document["categories"]
                 if isinstance(category, dict)}
        counts: Counter[str] = Counter()
        for annotation in document["annotations"]:
            if isinstance(annotation, dict):
                name = names.get(annotation.get("category_id"))
                if isinstance(name, str):
                    counts[name] += 1
        return {"source": f"COCO {entry.path}", "counts": counts}
    return None


def _from_folders(entries: list[LabelledFile], blob_path: Callable[[str], Path]) -> dict[str, Any] | None:
    counts: Counter[str] = Counter()
    splits: dict[str, Counter[str]] = {}
    images = (entry.path for entry in entries if (entry.media_type or "").startswith("image/"))
    for _path, split, label in folder_classes(images):
        counts[label] += 1
        if split is not None:
            splits.setdefault(split, Counter())[label] += 1
    if len(counts) < 2:  # one folder of images is a folder, not a class
        return None
    found: dict[str, Any] = {"source": "image folders", "counts": counts}
    if splits:
        found["splits"] = {split: dict(counted.most_common(MAX_LABELS_SHOWN)) for split, counted in sorted(splits.items())}
    return found
