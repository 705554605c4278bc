"""The labels a version's files carry, from the first of these forms found:
- a labels table at the top level (`labels.csv`, `labels.tsv`, `annotations.csv`, …): a header
  row with a column of file names (path, file, filename, image, …) and one of labels (label,
  class, category, target), as Kaggle's and most hand-made datasets give them;
- image folders: images at `CLASS/file` or `SPLIT/CLASS/file` (SPLIT one of train, val, test, …),
  as torchvision's ImageFolder and Keras' `image_dataset_from_directory` read them.

The files are the pushers' and may be anything: a table is parsed as data (csv) and a label is a
short string; what cannot be read gives no labels rather than an error. Reading is the caller's
(`read`), which bounds it: a table is never read past `MAX_LABEL_FILE_BYTES`.
"""

from __future__ import annotations

import csv
import io
import posixpath
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

MAX_LABEL_FILE_BYTES = 64 * 1024 * 1024
MAX_LABEL_LENGTH = 200
TABLE_NAMES = ("labels.csv", "labels.tsv", "annotations.csv", "annotations.tsv", "metadata.csv", "train.csv")
FILE_COLUMNS = ("path", "file", "filename", "file_name", "image", "image_path", "image_id", "id")
LABEL_COLUMNS = ("label", "labels", "class", "class_name", "category", "target")
SPLITS = frozenset({"train", "training", "val", "valid", "validation", "dev", "test", "testing", "eval"})
# Which splits are one: a file in `train/` and its copy in `training/` is no leak.
SPLIT_KINDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
               "dev": "val", "eval": "val", "test": "test", "testing": "test"}
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".dib", ".tif", ".tiff",
                              ".webp", ".ico", ".ppm", ".pgm", ".pbm", ".pnm", ".tga", ".jp2", ".j2k", ".pcx"})

Reader = Callable[[str], "bytes | None"]
T = TypeVar("T")


def file_labels(paths: list[str], read: Reader) -> tuple[str | None, dict[str, str]]:
    """(source, {path: label}): from the first labels table that names some of `paths`, else from
    image folders of two classes or more; (None, {}) where the files carry no labels."""
    known = set(paths)

    def labelled(name: str, rows: Iterator[tuple[str, str]]) -> dict[str, str]:
        return match_rows(rows, known, posixpath.dirname(name))

    for name, labels in labels_tables(paths, read, labelled):
        if labels:
            return f"table {name}", labels
    classes = {path: label for path, _split, label in folder_classes(path for path in paths if is_image(path))}
    if len(set(classes.values())) >= 2:  # one folder of images is a folder, not a class
        return "image folders", classes
    return None, {}


def is_image(path: str) -> bool:
    return posixpath.splitext(path)[1].lower() in IMAGE_EXTENSIONS


def split_of(path: str) -> str | None:
    """The first folder of `path`, lower-cased, where it names a split (train, test, val, …)."""
    first, slash, _rest = path.partition("/")
    return first.lower() if slash and first.lower() in SPLITS else None


def split_kind(path: str) -> str | None:
    """train, val or test: the split `path` lies in, its synonyms taken as one."""
    split = split_of(path)
    return SPLIT_KINDS[split] if split is not None else None


def labels_tables(paths: Iterable[str], read: Reader,
                  consume: Callable[[str, Iterator[tuple[str, str]]], T]) -> Iterator[tuple[str, T]]:
    """(path, what `consume` made of its rows) for each top-level labels table, in `TABLE_NAMES`
    order. Rows are (file column's value, label), the value "" where the row names no file, read
    as consumed (a table of millions of rows is never held as a list); a table that is not one
    (no header with a file and a label column, not UTF-8, broken CSV) is passed over."""
    tables = {path.lower(): path for path in paths if "/" not in path}
    for name in TABLE_NAMES:
        path = tables.get(name)
        content = read(path) if path is not None else None
        rows = _table_rows(content, "\t" if name.endswith(".tsv") else ",") if content is not None else None
        if rows is None:
            continue
        try:
            made = consume(path, rows)
        except csv.Error:
            continue
        yield path, made


def _table_rows(content: bytes, delimiter: str) -> Iterator[tuple[str, str]] | None:
    try:
        reader = csv.reader(io.StringIO(content.decode("utf-8-sig")), delimiter=delimiter)
        header = [column.strip().lower() for column in next(reader, [])]
    except (UnicodeDecodeError, csv.Error):
        return None
    label_column = next((header.index(column) for column in LABEL_COLUMNS if column in header), None)
    file_column = next((header.index(column) for column in FILE_COLUMNS if column in header), None)
    if label_column is None or file_column is None:
        return None
    return ((row[file_column].strip() if file_column < len(row) else "", label) for row in reader
            if label_column < len(row) and (label := clean_label(row[label_column])) is not None)


def match_rows(rows: Iterable[tuple[str, str]], known: set[str], folder: str) -> dict[str, str]:
    """{path: label} of the rows whose file names one of `known`, as given or relative to the
    table's folder; a file named twice keeps its first label."""
    labels: dict[str, str] = {}
    for value, label in rows:
        path = _known_path(value, known, folder)
        if path is not None:
            labels.setdefault(path, label)
    return labels


def _known_path(value: str, known: set[str], folder: str) -> str | None:
    # Tables written on Windows or by shell habit name `.\a.png` or `./a.png` for `a.png`.
    name = value.replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    if not name or name.startswith("/"):
        return None
    for candidate in (name, posixpath.join(folder, name) if folder else None):
        if candidate is not None and candidate in known:
            return candidate
    return None


def folder_classes(image_paths: Iterable[str]) -> Iterator[tuple[str, str | None, str]]:
    """(path, split as written or None, class) of each image at CLASS/file or SPLIT/CLASS/file."""
    for path in image_paths:
        parts = path.split("/")
        if len(parts) == 2 and parts[0].lower() not in SPLITS:
            yield path, None, parts[0]
        elif len(parts) == 3 and parts[0].lower() in SPLITS:
            yield path, parts[0], parts[1]


def clean_label(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    text = str(value).strip()
    return text[:MAX_LABEL_LENGTH] if text else None
