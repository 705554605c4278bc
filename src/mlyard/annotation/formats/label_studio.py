"""Label Studio's JSON export: a list of tasks, each `{"data": {"image": …}, "annotations":
[{"completed_by": …, "result": [...]}, …]}`. Of the results, `choices` (`value.choices`: labels
of the whole image), `rectanglelabels` (`value.x, y, width, height`: percentages of
`original_width` and `original_height`, from the top-left corner; `value.rectanglelabels`: a
box per label) and `textarea` (`value.text`, lines of free text) are read; other result types
(polygons, key points, brushes, relations) are passed over, and a rotated rectangle is refused.

`data.image` is a path of the version, or what Label Studio makes of one:
`/data/local-files/?d=PATH` (the version's file that PATH ends with) or
`/data/upload/N/HASH-NAME` (the one file of the version called NAME). Other URLs and absolute
paths are refused. `read` takes each task's last annotation that was not cancelled;
`read_annotators` takes every annotation, one set of annotations per annotator (`completed_by`:
an email where the export holds the user, else the user's id), for agreement measures.

`write` makes `label-studio.json`: a task per item, its `data.image` the version's path (prefix
it with `/data/local-files/?d=` where Label Studio serves the version's folder as local storage),
one annotation holding its results.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from mlyard.annotation.formats.common import (
    Reader,
    Sizes,
    Version,
    boxes_for_writing,
    check_outputs,
    check_writable,
    find_json,
    checked_box,
    checked_label,
    checked_text,
    image_size,
    kind_of,
    merged_labels,
    number,
    read_json,
    relative_path,
    sizes_of,
)
from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels

NAME = "Label Studio"
OUTPUT = "label-studio.json"
UPLOAD = re.compile(r"/data/upload/\d+/(?:[0-9a-f]{8}-)?(?P<name>[^/]+)")
LOCAL_FILES = "/data/local-files/"
Task = tuple[str, str, list[tuple[str, list[Any]]]]  # where, image, (annotator, results) of each annotation


def find(files: Iterable[str]) -> str | None:
    """`label-studio.json` at the top, else the one JSON file of the version."""
    return find_json(files, OUTPUT)


def read(files: Iterable[str], read_bytes: Reader, *, path: str | None = None,
         image_sizes: Sizes | None = None) -> Annotations:
    """Each task's last annotation that was not cancelled; tasks without one are left out."""
    items: dict[str, ItemLabels] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for where, image, done in _tasks(files, read_bytes, path):
        if done:
            items[image], size = _item(image, done[-1][1], where, image_sizes or {})
            if size is not None:
                sizes[image] = size
    return _collected(items, sizes, image_sizes)


def read_annotators(files: Iterable[str], read_bytes: Reader, *, path: str | None = None,
                    image_sizes: Sizes | None = None) -> dict[str, Annotations]:
    """`{annotator: their annotations}`; of two by one annotator on one task, the later."""
    items: dict[str, dict[str, ItemLabels]] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for where, image, done in _tasks(files, read_bytes, path):
        for index, (annotator, results) in enumerate(done):
            item, size = _item(image, results, f"{where} annotations[{index}]", image_sizes or {})
            items.setdefault(annotator, {})[image] = item
            if size is not None:
                sizes[image] = size
    return {annotator: _collected(found, sizes, image_sizes) for annotator, found in sorted(items.items())}


def _collected(items: dict[str, ItemLabels], sizes: Sizes, given: Sizes | None) -> Annotations:
    classes = {label for item in items.values() for label in item.labels}
    classes |= {box.label for item in items.values() for box in item.boxes}
    return Annotations(kind_of(items.values()), tuple(sorted(classes)), items, sizes_of(items, sizes, given))


def _tasks(files: Iterable[str], read_bytes: Reader, path: str | None) -> list[Task]:
    version = Version(files)
    path = path if path is not None else find(version.paths)
    if path is None or path not in version:
        raise FormatError(path, "is not a file of the version" if path else
                          "no Label Studio export in the version (label-studio.json, or the one JSON file): name it")
    document = read_json(path, read_bytes)
    if not isinstance(document, list):
        raise FormatError(path, "is not a Label Studio JSON export: a list of tasks")
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for index, task in enumerate(document):
        where = f"{path} task {index}"
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise FormatError(where, "a task is an object with `data`")
        image = _image(task["data"].get("image"), version, where)
        if image in seen:
            raise FormatError(where, f"{image} is the image of {seen[image]} too")
        seen[image] = where
        tasks.append((where, image, _annotations(task.get("annotations"), where)))
    return tasks


def _annotations(value: object, where: str) -> list[tuple[str, list[Any]]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise FormatError(where, "`annotations` is a list")
    found = []
    for index, annotation in enumerate(value):
        if not isinstance(annotation, dict) or not isinstance(annotation.get("result", []), list):
            raise FormatError(f"{where} annotations[{index}]", "an annotation is an object with a `result` list")
        if not annotation.get("was_cancelled"):
            found.append((_annotator(annotation.get("completed_by")), annotation.get("result", [])))
    return found


def _annotator(value: object) -> str:
    if isinstance(value, dict):
        value = value.get("email") or value.get("id")
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        return "unknown"
    return str(value)[:200]


def _image(value: object, version: Version, where: str) -> str:
    if not isinstance(value, str):
        raise FormatError(where, f"`data.image` is a path: {value!r:.100}")
    if value.startswith(LOCAL_FILES):
        named = urllib.parse.parse_qs(urllib.parse.urlsplit(value).query).get("d", [])
        if len(named) != 1:
            raise FormatError(where, f"names local files without one `d`: {value!r:.100}")
        return _by_tail(named[0], version, where)
    upload = UPLOAD.fullmatch(value)
    if upload:
        return version.find(urllib.parse.unquote(upload["name"]), where)
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value):
        raise FormatError(where, f"names a URL, not a file of the version: {value!r:.100}")
    return version.find(value, where)


def _by_tail(name: str, version: Version, where: str) -> str:
    """The version's file that `name` ends with: Label Studio's path is relative to its document
    root, of which the version may be a folder."""
    parts = relative_path(name, where).split("/")
    for start in range(len(parts)):
        candidate = "/".join(parts[start:])
        if candidate in version:
            return candidate
    raise FormatError(where, f"names {name!r:.100}, which ends with no file of the version")


def _item(image: str, results: list[Any], where: str, given: Sizes) -> tuple[ItemLabels, tuple[int, int] | None]:
    labels: tuple[str, ...] = ()
    boxes: list[Box] = []
    texts: list[str] = []
    size = None
    for index, result in enumerate(results):
        place = f"{where} result {index}"
        if not isinstance(result, dict) or not isinstance(result.get("value", {}), dict):
            raise FormatError(place, "a result is an object with a `value` object")
        kind, value = result.get("type"), result.get("value", {})
        if kind == "choices":
            labels = merged_labels(labels, (checked_label(label, place) for label in _strings(value, "choices", place)))
        elif kind == "textarea":
            texts += [checked_text(text, place) for text in _strings(value, "text", place)]
        elif kind == "rectanglelabels":
            size = size or _result_size(result, place) or given.get(image)
            boxes += _rectangles(value, size, place)
    text = "\n".join(texts) if texts else None
    return ItemLabels(image, labels, tuple(boxes), text), size


def _strings(value: dict[str, Any], key: str, where: str) -> list[Any]:
    found = value.get(key)
    if not isinstance(found, list):
        raise FormatError(where, f"`value.{key}` is a list")
    return found


def _result_size(result: dict[str, Any], where: str) -> tuple[int, int] | None:
    if result.get("original_width") is None and result.get("original_height") is None:
        return None
    return image_size(result.get("original_width"), result.get("original_height"), where)


def _rectangles(value: dict[str, Any], size: tuple[int, int] | None, where: str) -> list[Box]:
    if size is None:
        raise FormatError(where, "a rectangle without `original_width` and `original_height`, "
                                 "on an image of unknown size")
    if number(value.get("rotation", 0), where, "the rotation") % 360 != 0:
        raise FormatError(where, "a rotated rectangle: only boxes along the image's edges are read")
    x, y, width, height = (number(value.get(key), where, key) for key in ("x", "y", "width", "height"))
    scale_x, scale_y = size[0] / 100, size[1] / 100
    return [checked_box(checked_label(label, where), x * scale_x, y * scale_y, width * scale_x, height * scale_y,
                        size, where) for label in _strings(value, "rectanglelabels", where)]


def write(annotations: Annotations, files: Iterable[str]) -> dict[str, bytes]:
    """`{"label-studio.json": export}`: a task per item, sorted by path."""
    version = check_writable(annotations, files, ("classification", "boxes", "text"), NAME)
    check_outputs([OUTPUT], version)
    tasks = []
    for task_id, path in enumerate(sorted(annotations.items), start=1):
        tasks.append({"id": task_id, "data": {"image": path},
                      "annotations": [{"id": task_id, "was_cancelled": False,
                                       "result": _results(annotations, path)}]})
    return {OUTPUT: json.dumps(tasks, indent=1, ensure_ascii=False).encode()}


def _results(annotations: Annotations, path: str) -> list[dict[str, Any]]:
    item = annotations.items[path]
    results: list[dict[str, Any]] = []
    if item.labels:
        results.append({"type": "choices", "from_name": "choice", "to_name": "image",
                        "value": {"choices": list(item.labels)}})
    for box in boxes_for_writing(annotations, path):
        width, height = annotations.image_sizes[path]
        results.append({"type": "rectanglelabels", "from_name": "label", "to_name": "image",
                        "original_width": width, "original_height": height, "image_rotation": 0,
                        "value": {"x": box.x * 100 / width, "y": box.y * 100 / height,
                                  "width": box.width * 100 / width, "height": box.height * 100 / height,
                                  "rotation": 0, "rectanglelabels": [box.label]}})
    if item.text_label is not None:
        results.append({"type": "textarea", "from_name": "text", "to_name": "image",
                        "value": {"text": [checked_text(item.text_label, path)]}})
    for index, result in enumerate(results):
        result["id"] = f"r{index}"
    return results
