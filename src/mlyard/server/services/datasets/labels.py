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
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

MAX_LABEL_FILE_BYTES = 64 * 1024 * 1024
MAX_LABELS_SHOWN = 1_000
MAX_LABEL_LENGTH = 200
TABLE_NAMES = ("labels.csv", "labels.tsv", "annotations.csv", "annotations.tsv", "metadata.csv", "train.csv")
FILE_COLUMNS = ("path", "file", "filename", "file_name", "image", "image_path", "image_id", "id")
LABEL_COLUMNS = ("label", "labels", "class", "class_name", "category", "target")
SPLITS = frozenset({"train", "training", "val", "valid", "validation", "dev", "test", "testing", "eval"})


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


def _label(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    text = str(value).strip()
    return text[:MAX_LABEL_LENGTH] if text else None


def _from_table(entries: list[LabelledFile], blob_path: Callable[[str], Path]) -> dict[str, Any] | None:
    tables = {entry.path.lower(): entry for entry in entries if "/" not in entry.path}
    for name in TABLE_NAMES:
        entry = tables.get(name)
        content = _read(entry, blob_path) if entry is not None else None
        if content is None:
            continue
        try:
            text = content.decode("utf-8-sig")
            rows = csv.reader(io.StringIO(text), delimiter="\t" if name.endswith(".tsv") else ",")
            header = [column.strip().lower() for column in next(rows, [])]
        except (UnicodeDecodeError, csv.Error):
            continue
        label_column = next((header.index(column) for column in LABEL_COLUMNS if column in header), None)
        if label_column is None or not any(column in header for column in FILE_COLUMNS):
            continue
        counts: Counter[str] = Counter()
        try:
            for row in rows:
                if label_column < len(row) and (label := _label(row[label_column])) is not None:
                    counts[label] += 1
        except csv.Error:
            continue
        return {"source": f"table {entry.path}", "counts": counts}
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
        names = {category.get("id"): _label(category.get("name")) for category in document["categories"]
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
    for split, label in _image_classes(entries):
        counts[label] += 1
        if split is not None:
            splits.setdefault(split, Counter())[label] += 1
    if len(counts) < 2:  # one folder of images is a folder, not a class
        return None
    found: dict[str, Any] = {"source": "image folders", "counts": counts}
    if splits:
        found["splits"] = {split: dict(counted.most_common(MAX_LABELS_SHOWN)) for split, counted in sorted(splits.items())}
    return found


def _image_classes(entries: Iterable[LabelledFile]) -> Iterable[tuple[str | None, str]]:
    """(split or None, class) of each image at CLASS/file or SPLIT/CLASS/file."""
    for entry in entries:
        if not (entry.media_type or "").startswith("image/"):
            continue
        parts = entry.path.split("/")
        if len(parts) == 2 and parts[0].lower() not in SPLITS:
            yield None, parts[0]
        elif len(parts) == 3 and parts[0].lower() in SPLITS:
            yield parts[0], parts[1]
