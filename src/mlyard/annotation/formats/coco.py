"""COCO object detection JSON: `images` (id, file_name, width, height), `categories` (id, name)
and `annotations` (id, image_id, category_id, `bbox` [x, y, width, height] in pixels from the
top-left corner, area, iscrowd), as COCO, CVAT, Roboflow and Label Studio export it.

`file_name` is found as given, relative to the JSON file's folder, or as the one file of the
version ending with it (COCO's own files name images relative to an image folder, `val2017/`,
that they do not state). An annotation without `bbox` labels its whole image (classification).
Every image listed is an item, with no box where it has no annotation.

`write` makes `annotations.json`: categories numbered from 1 in the classes' order, images from 1
by path with `file_name` the version's path, `iscrowd` 0 and `area` width × height.
"""

from __future__ import annotations

import json
import posixpath
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
    image_size,
    kind_of,
    merged_labels,
    number,
    read_json,
    size_for_writing,
    sizes_of,
)
from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels

NAME = "COCO"
OUTPUT = "annotations.json"


def find(files: Iterable[str]) -> str | None:
    """`annotations.json` at the top, else the one JSON file of the version."""
    return find_json(files, OUTPUT)


def read(files: Iterable[str], read_bytes: Reader, *, path: str | None = None,
         image_sizes: Sizes | None = None) -> Annotations:
    version = Version(files)
    path = path if path is not None else find(version.paths)
    if path is None or path not in version:
        raise FormatError(path, "is not a file of the version" if path else
                          "no COCO file in the version (annotations.json, or the one JSON file): name it")
    document = read_json(path, read_bytes)
    if not isinstance(document, dict) or not all(
            isinstance(document.get(key), list) for key in ("images", "annotations", "categories")):
        raise FormatError(path, "is not COCO: a JSON object with lists `images`, `annotations` and `categories`")
    names = _categories(path, document["categories"])
    images, sizes = _images(path, document["images"], version)
    given = image_sizes or {}
    labels: dict[str, list[str]] = {image: [] for image in images.values()}
    boxes: dict[str, list[Box]] = {image: [] for image in images.values()}
    for index, annotation in enumerate(document["annotations"]):
        where = f"{path} annotations[{index}]"
        if not isinstance(annotation, dict):
            raise FormatError(where, "an annotation is an object")
        image = _lookup(images, annotation.get("image_id"), where, "image_id")
        label = _lookup(names, annotation.get("category_id"), where, "category_id")
        if annotation.get("bbox") is None:
            labels[image].append(label)
        else:
            boxes[image].append(_box(annotation["bbox"], label, sizes.get(image) or given.get(image), where))
    items = {image: ItemLabels(image, merged_labels((), labels[image]), tuple(boxes[image])) for image in labels}
    return Annotations(kind_of(items.values()), tuple(dict.fromkeys(names.values())), items,
                       sizes_of(items, sizes, image_sizes))


def _categories(path: str, categories: list[Any]) -> dict[Any, str]:
    names: dict[Any, str] = {}
    for index, category in enumerate(categories):
        where = f"{path} categories[{index}]"
        if not isinstance(category, dict):
            raise FormatError(where, "a category is an object")
        key = _identifier(category.get("id"), where)
        if key in names:
            raise FormatError(where, f"category id {key!r} is listed twice")
        names[key] = checked_label(category.get("name"), where)
    return names


def _images(path: str, images: list[Any], version: Version) -> tuple[dict[Any, str], dict[str, tuple[int, int]]]:
    folders = (posixpath.dirname(path), "")
    paths: dict[Any, str] = {}
    seen: set[str] = set()
    sizes: dict[str, tuple[int, int]] = {}
    for index, image in enumerate(images):
        where = f"{path} images[{index}]"
        if not isinstance(image, dict):
            raise FormatError(where, "an image is an object")
        key = _identifier(image.get("id"), where)
        if key in paths:
            raise FormatError(where, f"image id {key!r} is listed twice")
        found = version.find(image.get("file_name"), where, folders)
        if found in seen:
            raise FormatError(where, f"{found} is listed twice")
        paths[key] = found
        seen.add(found)
        if image.get("width") is not None or image.get("height") is not None:
            sizes[found] = image_size(image.get("width"), image.get("height"), where)
    return paths, sizes


def _identifier(value: object, where: str) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise FormatError(where, f"an id is a number or text: {value!r:.60}")
    return value


def _lookup(table: dict[Any, str], value: object, where: str, what: str) -> str:
    key = _identifier(value, where)
    if key not in table:
        raise FormatError(where, f"{what} {key!r:.60} names no {what.partition('_')[0]} of the file")
    return table[key]


def _box(bbox: object, label: str, size: tuple[int, int] | None, where: str) -> Box:
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise FormatError(where, f"a bbox is [x, y, width, height]: {bbox!r:.100}")
    x, y, width, height = (number(value, where, "a bbox value") for value in bbox)
    return checked_box(label, x, y, width, height, size, where)


def write(annotations: Annotations, files: Iterable[str]) -> dict[str, bytes]:
    """`{"annotations.json": document}`; every item is an image, with its boxes and labels."""
    version = check_writable(annotations, files, ("classification", "boxes"), NAME)
    check_outputs([OUTPUT], version)
    classes = annotations.used_classes()
    category = {name: index for index, name in enumerate(classes, start=1)}
    images, entries = [], []
    for image_id, path in enumerate(sorted(annotations.items), start=1):
        item = annotations.items[path]
        image: dict[str, Any] = {"id": image_id, "file_name": path}
        if item.boxes or path in annotations.image_sizes:
            image["width"], image["height"] = size_for_writing(annotations, path)
        images.append(image)
        for label in item.labels:
            entries.append({"image_id": image_id, "category_id": category[label], "iscrowd": 0})
        for box in boxes_for_writing(annotations, path):
            entries.append({"image_id": image_id, "category_id": category[box.label],
                            "bbox": [box.x, box.y, box.width, box.height], "area": box.width * box.height,
                            "iscrowd": 0})
    for annotation_id, entry in enumerate(entries, start=1):
        entry["id"] = annotation_id
    document = {"info": {"description": "annotations"}, "licenses": [], "images": images,
                "categories": [{"id": category[name], "name": name, "supercategory": ""} for name in classes],
                "annotations": entries}
    return {OUTPUT: json.dumps(document, indent=1).encode()}
