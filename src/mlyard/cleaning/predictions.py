"""Label issues from a model's out-of-sample predicted probabilities (confident learning:
cleanlab's `find_label_issues`, ranked by self-confidence, the probability the model gave the
file's own label).

The predictions are a CSV with a `path` column and one column per class, headed by the class
label as the version's labels name it, as `cross_val_predict(..., method="predict_proba")` over
the labelled files gives them with `model.classes_` as the header. In-sample probabilities would
hide the issues: a model that saw a wrong label learned it.
"""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path
from typing import Any

from mlyard.cleaning import extras
from mlyard.cleaning.extras import CleaningError

PATH_COLUMN = "path"


def read_predictions(source: Path) -> tuple[list[str], dict[str, list[float]]]:
    """(classes, {path: probabilities}) of a predictions CSV; CleaningError naming the line of
    what is not one."""
    try:
        with open(source, newline="", encoding="utf-8-sig") as file:
            return _parse(csv.reader(file), source.name)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise CleaningError(f"cannot read the predictions {source}: {error}") from error


def _parse(reader: Any, name: str) -> tuple[list[str], dict[str, list[float]]]:
    header = [column.strip() for column in next(reader, [])]
    if PATH_COLUMN not in header:
        raise CleaningError(f"{name}: no `{PATH_COLUMN}` column in its header")
    where = header.index(PATH_COLUMN)
    classes = header[:where] + header[where + 1:]
    if len(classes) < 2 or len(set(classes)) != len(classes) or "" in classes:
        raise CleaningError(f"{name}: the header needs two classes or more, each named once")
    rows: dict[str, list[float]] = {}
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise CleaningError(f"{name}, line {reader.line_num}: {len(row)} values for {len(header)} columns")
        values = row[:where] + row[where + 1:]
        rows.setdefault(row[where].strip(), [_probability(value, name, reader.line_num) for value in values])
    return classes, rows


def _probability(text: str, name: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CleaningError(f"{name}, line {line}: {text[:40]!r} is not a probability") from None
    if not math.isfinite(value) or value < 0:
        raise CleaningError(f"{name}, line {line}: {text[:40]!r} is not a probability")
    return value


def label_issues(labels: dict[str, str], source: Path) -> list[dict[str, Any]]:
    """The labelled files cleanlab finds likely mislabelled, most likely first:
    `{"path", "label", "suggested", "quality"}` (quality: the probability of the given label)."""
    np = extras.numpy()
    classes, rows = read_predictions(source)
    index = {label: column for column, label in enumerate(classes)}
    paths = sorted(path for path in rows if labels.get(path) in index)
    if not paths:
        raise CleaningError(f"{source.name}: no row names a labelled file whose label is one of its columns")
    given = np.array([index[labels[path]] for path in paths])
    probabilities = np.array([rows[path] for path in paths], dtype=float)
    totals = probabilities.sum(axis=1, keepdims=True)
    probabilities = np.divide(probabilities, totals, out=np.full_like(probabilities, 1 / len(classes)),
                              where=totals > 0)
    find = extras.find_label_issues()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "too few examples in class 3": the ranking says enough
        try:
            ranked = find(given, probabilities, return_indices_ranked_by="self_confidence", n_jobs=1)
        except (ValueError, TypeError, AssertionError) as error:
            raise CleaningError(f"cleanlab refused the predictions: {error}") from error
    return [{"path": paths[row], "label": labels[paths[row]],
             "suggested": classes[int(probabilities[row].argmax())],
             "quality": round(float(probabilities[row, given[row]]), 4)} for row in ranked.tolist()]
