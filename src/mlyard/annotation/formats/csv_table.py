"""A labels table: a header row with a file column (path, file, filename, image, …) and a label
column (label, class, category, target), a row per file, several labels of one file joined by
`;` (`a.jpg,cat;outdoor`), as Kaggle's and most hand-made datasets give them; or a `text` column
of free text instead of a label. A file named on several rows gets the labels of all of them.
A file named with an empty label was looked at and holds none.

`write` makes `labels.csv` with the header `path,label` (or `path,text`), a row per item sorted
by path.
"""

from __future__ import annotations

import csv
import io
import posixpath
from collections.abc import Iterable, Iterator

from mlyard.annotation.formats.common import (
    Reader,
    Sizes,
    Version,
    check_outputs,
    check_writable,
    checked_label,
    checked_text,
    merged_labels,
    read_text,
    sizes_of,
)
from mlyard.annotation.model import Annotations, FormatError, ItemLabels
from mlyard.cleaning.labels import FILE_COLUMNS, LABEL_COLUMNS, TABLE_NAMES

NAME = "CSV"
OUTPUT = "labels.csv"
TEXT_COLUMNS = ("text", "transcription", "caption", "sentence")
SEPARATOR = ";"


def find(files: Iterable[str]) -> str | None:
    """The first top-level labels table, in `TABLE_NAMES` order (labels.csv first)."""
    tables = {path.lower(): path for path in files if "/" not in path}
    return next((tables[name] for name in TABLE_NAMES if name in tables), None)


def read(files: Iterable[str], read_bytes: Reader, *, path: str | None = None,
         image_sizes: Sizes | None = None) -> Annotations:
    version = Version(files)
    path = path if path is not None else find(version.paths)
    if path is None or path not in version:
        raise FormatError(path, "no labels table in the version" if path is None else "is not a file of the version")
    rows = _rows(path, read_text(path, read_bytes))
    file_column, label_column, text_column = _columns(path, next(rows, (0, []))[1])
    items: dict[str, ItemLabels] = {}
    folder = posixpath.dirname(path)
    for line, row in rows:
        if not any(cell.strip() for cell in row):
            continue
        where = f"{path} line {line}"
        target = version.find(_cell(row, file_column), where, (folder,))
        if label_column is not None:
            labels = [checked_label(label, where) for label in _cell(row, label_column).split(SEPARATOR)
                      if label.strip()]
            known = items.get(target, ItemLabels(target))
            items[target] = ItemLabels(target, merged_labels(known.labels, labels))
        else:
            items[target] = _with_text(items.get(target), target, checked_text(_cell(row, text_column), where), where)
    kind = "classification" if label_column is not None else "text"
    classes = tuple(sorted({label for item in items.values() for label in item.labels}))
    return Annotations(kind, classes, items, sizes_of(items, {}, image_sizes))


def _rows(path: str, text: str) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of each row, the header first; parsed as consumed."""
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as error:
        raise FormatError(path, f"is not CSV (line {reader.line_num}): {error}") from None


def _columns(path: str, header: list[str]) -> tuple[int, int | None, int | None]:
    names = [column.strip().lower() for column in header]
    file_column = next((names.index(name) for name in FILE_COLUMNS if name in names), None)
    label_column = next((names.index(name) for name in LABEL_COLUMNS if name in names), None)
    text_column = next((names.index(name) for name in TEXT_COLUMNS if name in names), None)
    if file_column is None or (label_column is None and text_column is None):
        raise FormatError(path, f"its header names no file column ({', '.join(FILE_COLUMNS[:4])}, …) "
                                f"and label column ({', '.join(LABEL_COLUMNS)}) or text column")
    return file_column, label_column, text_column


def _cell(row: list[str], column: int | None) -> str:
    return row[column] if column is not None and column < len(row) else ""


def _with_text(known: ItemLabels | None, path: str, text: str, where: str) -> ItemLabels:
    if not text.strip():
        return known or ItemLabels(path)
    if known is not None and known.text_label not in (None, text):
        raise FormatError(where, f"{path} is given two different texts")
    return ItemLabels(path, text_label=text)


def write(annotations: Annotations, files: Iterable[str]) -> dict[str, bytes]:
    """`{"labels.csv": table}`: a row per item, its labels joined by `;` (or its text)."""
    version = check_writable(annotations, files, ("classification", "text"), NAME)
    check_outputs([OUTPUT], version)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    text = annotations.kind == "text"
    writer.writerow(["path", "text" if text else "label"])
    for path in sorted(annotations.items):
        item = annotations.items[path]
        if text:
            writer.writerow([path, checked_text(item.text_label or "", path)])
            continue
        if any(SEPARATOR in label for label in item.labels):
            raise FormatError(path, f"a label holds {SEPARATOR!r}, which separates labels in a table")
        writer.writerow([path, SEPARATOR.join(item.labels)])
    return {OUTPUT: buffer.getvalue().encode()}
