"""YOLO (Darknet, Ultralytics): a text file per image, a line per box,
`class_id centre_x centre_y width height`, the four numbers fractions of the image's width and
height, the class an index into the names of `data.yaml` (`names:` a list, or a mapping from
index to name), `classes.txt` or `obj.names` (a name per line). An image's label file is the
image's path with its last `images/` folder as `labels/` and `.txt` for its extension (as
Ultralytics finds it), else the `.txt` beside the image; an image with neither is unlabelled,
one with an empty file holds no object.

The fractions need each image's size in pixels: the caller passes `image_sizes` (read from the
images' headers). `write` makes a label file per item (empty where it holds no box), and
`classes.txt` and `data.yaml` at the top (with `train`, `val`, `test` where the images lie in
`images/SPLIT/`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import yaml

from mlyard.annotation.formats.common import (
    Reader,
    Sizes,
    Version,
    boxes_for_writing,
    check_outputs,
    check_writable,
    checked_box,
    checked_label,
    number,
    read_text,
    sizes_of,
)
from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels
from mlyard.cleaning.labels import SPLIT_KINDS, is_image

NAME = "YOLO"
NAMES_FILES = ("data.yaml", "data.yml", "dataset.yaml", "classes.txt", "obj.names", "classes.names")
PRECISION = 6  # decimals of a fraction: a micro-pixel on any image a disk holds


def label_paths(image: str) -> list[str]:
    """Where an image's label file may be, Ultralytics' place first."""
    stem = posixpath.splitext(image)[0]
    rooted = "/" + stem
    if "/images/" in rooted:
        return ["/labels/".join(rooted.rsplit("/images/", 1))[1:] + ".txt", stem + ".txt"]
    return [stem + ".txt"]


def find_names(files: Iterable[str]) -> str | None:
    """The class names' file: a top-level one of `NAMES_FILES` in their order, else the first
    such file anywhere (by path)."""
    files = list(files)
    top = set(files)
    found = next((name for name in NAMES_FILES if name in top), None)
    if found is not None:
        return found
    nested = sorted(path for path in files if posixpath.basename(path) in NAMES_FILES)
    return nested[0] if nested else None


def read(files: Iterable[str], read_bytes: Reader, *, image_sizes: Sizes | None = None) -> Annotations:
    version = Version(files)
    names_path = find_names(version.paths)
    if names_path is None:
        raise FormatError(None, f"no class names in the version ({', '.join(NAMES_FILES)})")
    names = read_names(names_path, read_bytes)
    sizes = image_sizes or {}
    items: dict[str, ItemLabels] = {}
    owners: dict[str, str] = {}
    for image in sorted(path for path in version.paths if is_image(path)):
        label = next((path for path in label_paths(image) if path in version and path != names_path), None)
        if label is None:
            continue
        if label in owners:
            raise FormatError(label, f"is the label file of both {owners[label]} and {image}")
        owners[label] = image
        boxes = _boxes(label, read_text(label, read_bytes), names, image, sizes.get(image))
        items[image] = ItemLabels(image, boxes=boxes)
    if not items:
        raise FormatError(None, "no image of the version has a YOLO label file (labels/…/NAME.txt or NAME.txt)")
    return Annotations("boxes", names, items, sizes_of(items, {}, image_sizes))


def read_names(path: str, read_bytes: Reader) -> tuple[str, ...]:
    text = read_text(path, read_bytes)
    if path.endswith((".yaml", ".yml")):
        names = _yaml_names(path, text)
    else:
        lines = text.splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        names = [checked_label(line, f"{path} line {line_number}") for line_number, line in enumerate(lines, start=1)]
    if not names:
        raise FormatError(path, "names no class")
    if len(set(names)) != len(names):
        raise FormatError(path, "names a class twice")
    return tuple(names)


def _yaml_names(path: str, text: str) -> list[str]:
    try:
        document = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as error:
        raise FormatError(path, f"is not YAML: {str(error).splitlines()[0] if str(error) else error!r}") from None
    names = document.get("names") if isinstance(document, dict) else None
    if isinstance(names, dict):
        # Ultralytics writes {0: person, 1: bicycle, …}: the indices must be 0…n-1.
        if set(names) != set(range(len(names))):
            raise FormatError(path, "`names` maps indices 0, 1, … to names")
        names = [names[index] for index in range(len(names))]
    if not isinstance(names, list):
        raise FormatError(path, "has no `names` list")
    return [checked_label(name, f"{path} names[{index}]") for index, name in enumerate(names)]


def _boxes(path: str, text: str, names: tuple[str, ...], image: str,
           size: tuple[int, int] | None) -> tuple[Box, ...]:
    boxes = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{path} line {line_number}"
        if len(fields) != 5:
            raise FormatError(where, f"a line is `class_id centre_x centre_y width height`: {line!r:.100}")
        class_id = int(fields[0]) if fields[0].isascii() and fields[0].isdigit() and len(fields[0]) < 10 else -1
        if not 0 <= class_id < len(names):
            raise FormatError(where, f"class id {fields[0]!r:.20} is not one of the {len(names)} classes")
        if size is None:
            raise FormatError(where, f"the size of {image} is unknown: YOLO's coordinates are fractions of it")
        centre_x, centre_y, width, height = (number(field, where, "a coordinate") for field in fields[1:])
        if not all(0 <= value <= 1 for value in (centre_x, centre_y, width, height)):
            raise FormatError(where, "a coordinate is not a fraction of the image (0 to 1)")
        pixels_w, pixels_h = width * size[0], height * size[1]
        boxes.append(checked_box(names[class_id], centre_x * size[0] - pixels_w / 2,
                                 centre_y * size[1] - pixels_h / 2, pixels_w, pixels_h, size, where))
    return tuple(boxes)


def write(annotations: Annotations, files: Iterable[str]) -> dict[str, bytes]:
    """A label file per item, `classes.txt` and `data.yaml` (see above)."""
    version = check_writable(annotations, files, ("boxes",), NAME)
    classes = annotations.used_classes()
    index = {name: class_id for class_id, name in enumerate(classes)}
    outputs: dict[str, bytes] = {}
    owners: dict[str, str] = {}
    for path in sorted(annotations.items):
        if annotations.items[path].labels:
            raise FormatError(path, "YOLO holds boxes, not labels of whole images")
        label = label_paths(path)[0]
        if label in owners:
            raise FormatError(label, f"would be the label file of both {owners[label]} and {path}")
        owners[label] = path
        outputs[label] = "".join(_line(box, index[box.label], annotations.image_sizes[path]) + "\n"
                                 for box in boxes_for_writing(annotations, path)).encode()
    outputs["classes.txt"] = "".join(name + "\n" for name in classes).encode()
    outputs["data.yaml"] = _data_yaml(classes, annotations.items).encode()
    check_outputs(outputs, version)
    return outputs


def _line(box: Box, class_id: int, size: tuple[int, int]) -> str:
    values = ((box.x + box.width / 2) / size[0], (box.y + box.height / 2) / size[1],
              box.width / size[0], box.height / size[1])
    return " ".join([str(class_id)] + [f"{value:.{PRECISION}f}" for value in values])


def _data_yaml(classes: tuple[str, ...], paths: Iterable[str]) -> str:
    # No `path`: Ultralytics takes a relative one from its own datasets folder, and without one
    # the folder of data.yaml, which is what the splits are relative to.
    document: dict[str, object] = {}
    for path in sorted(paths):
        parts = path.split("/")
        if len(parts) > 2 and parts[0] == "images" and parts[1].lower() in SPLIT_KINDS:
            document.setdefault(SPLIT_KINDS[parts[1].lower()], f"images/{parts[1]}")
    document["nc"] = len(classes)
    document["names"] = list(classes)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
