"""What every format needs of a version's files: bounded reads, paths named inside label files
resolved to files of the version (never outside it), labels and boxes checked as hostile data."""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels, Kind
from mlyard.cleaning.labels import MAX_LABEL_FILE_BYTES, MAX_LABEL_LENGTH

Reader = Callable[[str], "bytes | None"]
Sizes = Mapping[str, tuple[int, int]]
# Exporting tools round box edges: one that passes the image's edge by up to a pixel is clipped
# to it; further out is a broken box, not rounding.
EDGE_SLACK = 1.0
MAX_IMAGE_SIDE = 1 << 20


def read_file(path: str, read_bytes: Reader) -> bytes:
    content = read_bytes(path)
    if content is None:
        raise FormatError(path, "cannot be read")
    if len(content) > MAX_LABEL_FILE_BYTES:
        raise FormatError(path, f"is over {MAX_LABEL_FILE_BYTES >> 20} MiB, the most a label file may hold")
    return content


def read_text(path: str, read_bytes: Reader) -> str:
    try:
        return read_file(path, read_bytes).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise FormatError(path, f"is not UTF-8 text (byte {error.start})") from None


def find_json(files: Iterable[str], output: str) -> str | None:
    """`output` at the top of the version, else its one JSON file: where a format kept in one JSON
    file (COCO, Label Studio) is looked for when its path is not named."""
    documents = sorted(path for path in files if path.lower().endswith(".json"))
    if output in documents:
        return output
    return documents[0] if len(documents) == 1 else None


def read_json(path: str, read_bytes: Reader) -> Any:
    text = read_text(path, read_bytes)
    try:
        return json.loads(text)
    except ValueError as error:  # JSONDecodeError, and integers past Python's digit limit
        raise FormatError(path, f"is not JSON: {error}") from None
    except RecursionError:
        raise FormatError(path, "is JSON nested too deep") from None


def relative_path(value: object, source: str) -> str:
    """`value` as a normalized relative path; FormatError where it is not text, absolute, or
    leads up (`..`). Backslashes are taken as separators: Windows tools write them."""
    if not isinstance(value, str):
        raise FormatError(source, f"a file name is text: {value!r:.100}")
    if not value.strip():
        raise FormatError(source, "names no file (an empty file name)")
    name = value.replace("\\", "/")
    if "\0" in name:
        raise FormatError(source, f"a file name holds NUL: {value!r:.100}")
    if name.startswith("/") or (name[:1].isalpha() and name[1:2] == ":" and name[2:3] in ("", "/")):
        raise FormatError(source, f"names an absolute path: {value!r:.100}")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise FormatError(source, f"names a path leading up (..): {value!r:.100}")
    if not parts:
        raise FormatError(source, f"names no file: {value!r:.100}")
    return "/".join(parts)


class Version:
    """The version's files, to find those that label files name."""

    def __init__(self, files: Iterable[str]) -> None:
        self.paths = set(files)
        self._by_name: dict[str, list[str]] | None = None

    def __contains__(self, path: object) -> bool:
        return path in self.paths

    def find(self, value: object, source: str, folders: Iterable[str] = ("",)) -> str:
        """The file of the version that `value` names: as given, relative to one of `folders`,
        else the one file whose path ends with it (COCO's `file_name` is relative to an image
        folder the file does not name); FormatError where none or several match."""
        name = relative_path(value, source)
        for folder in folders:
            candidate = posixpath.join(folder, name) if folder else name
            if candidate in self.paths:
                return candidate
        matches = [path for path in self._named(posixpath.basename(name)) if path.endswith("/" + name)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise FormatError(source, f"{value!r:.100} matches several files of the version: "
                                      f"{', '.join(sorted(matches)[:3])}")
        raise FormatError(source, f"names {value!r:.100}, which is not a file of the version")

    def _named(self, basename: str) -> list[str]:
        if self._by_name is None:
            self._by_name = {}
            for path in self.paths:
                self._by_name.setdefault(posixpath.basename(path), []).append(path)
        return self._by_name.get(basename, [])


def checked_label(value: object, source: str) -> str:
    """A class name: text of 1 to `MAX_LABEL_LENGTH` characters, no control characters (they
    would break the line-based formats and cannot stand in XML)."""
    if not isinstance(value, str):
        raise FormatError(source, f"a label is text: {value!r:.100}")
    text = value.strip()
    if not text:
        raise FormatError(source, "a label is empty")
    if len(text) > MAX_LABEL_LENGTH:
        raise FormatError(source, f"a label is over {MAX_LABEL_LENGTH} characters: {text[:40]!r}…")
    if any(ord(character) < 32 or ord(character) == 127 for character in text):
        raise FormatError(source, f"a label holds a control character: {text!r:.100}")
    return text


def checked_text(value: object, source: str) -> str:
    """A free-text label: any text but NUL and the control characters XML cannot hold."""
    if not isinstance(value, str):
        raise FormatError(source, f"a text label is text: {value!r:.100}")
    if any(ord(character) < 32 and character not in "\t\n\r" for character in value):
        raise FormatError(source, "a text label holds a control character")
    return value


def number(value: object, source: str, what: str) -> float:
    """A finite number from JSON, XML or a text line; FormatError for anything else."""
    if isinstance(value, bool):
        raise FormatError(source, f"{what} is not a number: {value!r:.60}")
    try:
        result = float(value) if isinstance(value, (int, float, str)) else math.nan
    except (ValueError, OverflowError):
        result = math.nan
    if not math.isfinite(result):
        raise FormatError(source, f"{what} is not a finite number: {value!r:.60}")
    return result


def image_size(width: object, height: object, source: str) -> tuple[int, int]:
    sides = []
    for side, what in ((width, "width"), (height, "height")):
        value = number(side, source, f"the image's {what}")
        if value != int(value) or not 0 < value <= MAX_IMAGE_SIDE:
            raise FormatError(source, f"the image's {what} is not a size in pixels: {side!r:.60}")
        sides.append(int(value))
    return sides[0], sides[1]


def checked_box(label: str, x: float, y: float, width: float, height: float,
                size: tuple[int, int] | None, source: str) -> Box:
    """A box in pixels, within the image where its size is known (clipped to it when it passes
    the edge by up to `EDGE_SLACK`); FormatError for an empty, negative or outlying one."""
    where = f"box {label!r} at ({x:g}, {y:g}) of {width:g}×{height:g}"
    if width <= 0 or height <= 0:
        raise FormatError(source, f"{where}: its width and height must be positive")
    if x < -EDGE_SLACK or y < -EDGE_SLACK:
        raise FormatError(source, f"{where}: it starts outside the image (negative)")
    if size is not None and (x + width > size[0] + EDGE_SLACK or y + height > size[1] + EDGE_SLACK):
        raise FormatError(source, f"{where}: it passes the image's edge ({size[0]}×{size[1]})")
    # Sides are recomputed only where clipped: a box within the image keeps its numbers exactly.
    if x < 0:
        x, width = 0.0, width + x
    if y < 0:
        y, height = 0.0, height + y
    if size is not None and x + width > size[0]:
        width = size[0] - x
    if size is not None and y + height > size[1]:
        height = size[1] - y
    if width <= 0 or height <= 0:
        raise FormatError(source, f"{where}: nothing of it lies within the image")
    return Box(label, x, y, width, height)


def kind_of(items: Iterable[ItemLabels]) -> Kind:
    """Boxes where any item has one, text where items carry text and no class, else classes."""
    items = list(items)
    if any(item.boxes for item in items):
        return "boxes"
    if any(item.text_label is not None for item in items) and not any(item.labels for item in items):
        return "text"
    return "classification"


def sizes_of(items: Iterable[str], found: Sizes, given: Sizes | None) -> dict[str, tuple[int, int]]:
    """Each item's size as the label files say it, else as the caller measured it."""
    sizes = {}
    for path in items:
        size = found.get(path) or (given or {}).get(path)
        if size is not None:
            sizes[path] = size
    return sizes


def merged_labels(first: tuple[str, ...], second: Iterable[str]) -> tuple[str, ...]:
    return first + tuple(label for label in dict.fromkeys(second) if label not in first)


def check_writable(annotations: Annotations, files: Iterable[str], kinds: tuple[Kind, ...],
                   format_name: str) -> Version:
    """The version, once every item names one of its files and the kind is one `format_name` holds."""
    if annotations.kind not in kinds:
        raise FormatError(None, f"{format_name} holds {' or '.join(kinds)} annotations, not {annotations.kind}")
    version = Version(files)
    for path, item in annotations.items.items():
        if path not in version or item.path != path:
            raise FormatError(path, "is not a file of the version")
        for label in item.labels + tuple(box.label for box in item.boxes):
            checked_label(label, path)
    return version


def check_outputs(outputs: Iterable[str], version: Version) -> None:
    """A written label file may replace a file of the version, never stand where the version has
    a folder or under one of its files: the child version's paths must stay a tree."""
    folders = {parent for path in version.paths for parent in _parents(path)}
    for output in outputs:
        if output in folders or any(parent in version.paths for parent in _parents(output)):
            raise FormatError(output, "would stand where the version has a folder, or under one of its files")


def _parents(path: str) -> Iterable[str]:
    parent = posixpath.dirname(path)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)


def size_for_writing(annotations: Annotations, path: str) -> tuple[int, int]:
    size = annotations.image_sizes.get(path)
    if size is None:
        raise FormatError(path, "its image size is unknown: boxes cannot be written without it")
    return size


def boxes_for_writing(annotations: Annotations, path: str) -> list[Box]:
    """The item's boxes, each checked against its image as a read box is."""
    boxes = annotations.items[path].boxes
    if not boxes:
        return []
    size = size_for_writing(annotations, path)
    return [checked_box(box.label, box.x, box.y, box.width, box.height, size, path) for box in boxes]
