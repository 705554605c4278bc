"""Pascal VOC XML: one `<annotation>` file per image with its `<filename>`, `<size>` (width,
height) and an `<object>` per box (`<name>`, `<bndbox>` with xmin, ymin, xmax, ymax), as the
PASCAL VOC devkit and LabelImg write them. The devkit's corners are 1-based pixel indices, both
included: a box from pixel 1 to pixel 10 is x 0, width 10 here.

The files read are the `.xml` files under an `Annotations/` folder and those beside an image
of the same name (`a.xml` beside `a.jpg`, as LabelImg saves them). `<filename>` is found beside the XML file, in `../JPEGImages/` (the
devkit's layout) or as the one file of the version ending with it; `<path>` (the annotating
machine's absolute path) is not read. The XML is the pusher's: it is parsed by defusedxml with
DTDs refused, so no entity (billion laughs) or external reference is ever expanded.

`write` makes `DIR/Annotations/NAME.xml` for an image at `DIR/JPEGImages/NAME.EXT`, else
`NAME.xml` beside the image; corners are rounded to whole pixels.
"""

from __future__ import annotations

import posixpath
import xml.etree.ElementTree as ElementTree  # builds our own XML; user XML is parsed by defusedxml only
from collections.abc import Iterable

import defusedxml
import defusedxml.ElementTree

from mlyard.annotation.formats.common import (
    Reader,
    Sizes,
    Version,
    boxes_for_writing,
    check_outputs,
    check_writable,
    checked_box,
    checked_label,
    image_size,
    number,
    read_file,
    sizes_of,
)
from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels
from mlyard.cleaning.labels import is_image

NAME = "Pascal VOC"
CORNERS = ("xmin", "ymin", "xmax", "ymax")


def read(files: Iterable[str], read_bytes: Reader, *, image_sizes: Sizes | None = None) -> Annotations:
    version = Version(files)
    documents = _documents(version.paths)
    if not documents:
        raise FormatError(None, "no VOC XML file in the version")
    items: dict[str, ItemLabels] = {}
    sizes: dict[str, tuple[int, int]] = {}
    owners: dict[str, str] = {}
    for path in documents:
        root = parse(path, read_file(path, read_bytes))
        image, size, boxes = _annotation(path, root, version, image_sizes or {})
        if image in owners:
            raise FormatError(path, f"annotates {image}, which {owners[image]} annotates too")
        owners[image] = path
        items[image] = ItemLabels(image, boxes=boxes)
        if size is not None:
            sizes[image] = size
    return Annotations("boxes", tuple(sorted({box.label for item in items.values() for box in item.boxes})),
                       items, sizes_of(items, sizes, image_sizes))


def _documents(paths: set[str]) -> list[str]:
    """The `.xml` files under an `Annotations/` folder or beside an image of the same name."""
    stems = {posixpath.splitext(path)[0] for path in paths if is_image(path)}
    return sorted(path for path in paths if path.lower().endswith(".xml") and (
        "Annotations" in path.split("/")[:-1] or posixpath.splitext(path)[0] in stems))


def parse(path: str, content: bytes) -> ElementTree.Element:
    """The document's root; FormatError for anything but plain XML (a DTD is refused outright:
    entities and external references need one)."""
    try:
        return defusedxml.ElementTree.fromstring(content, forbid_dtd=True)
    except defusedxml.DefusedXmlException as error:
        raise FormatError(path, f"declares a DTD, entities or external references, which are refused "
                                f"({type(error).__name__})") from None
    except (defusedxml.ElementTree.ParseError, LookupError, ValueError) as error:
        # LookupError and ValueError: an encoding declared that Python does not know or expat cannot read.
        raise FormatError(path, f"is not XML: {error}") from None


def _annotation(path: str, root: ElementTree.Element, version: Version,
                given: Sizes) -> tuple[str, tuple[int, int] | None, tuple[Box, ...]]:
    if root.tag != "annotation":
        raise FormatError(path, f"is not a VOC annotation: its root is <{root.tag:.40}>")
    folder = posixpath.dirname(path)
    image = version.find(_text(root, "filename", path), path,
                         (folder, posixpath.join(posixpath.dirname(folder), "JPEGImages")))
    size_element = root.find("size")
    size = None
    if size_element is not None:
        size = image_size(_text(size_element, "width", path), _text(size_element, "height", path), f"{path} <size>")
    boxes = []
    for index, element in enumerate(root.findall("object"), start=1):
        where = f"{path} object {index}"
        label = checked_label(_text(element, "name", where), where)
        corners = element.find("bndbox")
        if corners is None:
            raise FormatError(where, "has no <bndbox>")
        xmin, ymin, xmax, ymax = (number(_text(corners, corner, where), where, corner) for corner in CORNERS)
        boxes.append(checked_box(label, xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1,
                                 size or given.get(image), where))
    return image, size, tuple(boxes)


def _text(element: ElementTree.Element, tag: str, where: str) -> str:
    child = element.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise FormatError(where, f"has no <{tag}>")
    return child.text.strip()


def xml_path(image: str) -> str:
    """Where `write` puts an image's annotation."""
    folder, name = posixpath.split(image)
    stem = posixpath.splitext(name)[0]
    if posixpath.basename(folder) == "JPEGImages":
        return posixpath.join(posixpath.dirname(folder), "Annotations", stem + ".xml")
    return posixpath.join(folder, stem + ".xml")


def write(annotations: Annotations, files: Iterable[str]) -> dict[str, bytes]:
    """An XML file per item (see above), holding its boxes."""
    version = check_writable(annotations, files, ("boxes",), NAME)
    outputs: dict[str, bytes] = {}
    owners: dict[str, str] = {}
    for path in sorted(annotations.items):
        if annotations.items[path].labels:
            raise FormatError(path, "VOC holds boxes, not labels of whole images")
        if any(ord(character) < 32 for character in path):
            raise FormatError(path, "its name holds a control character, which XML cannot hold")
        target = xml_path(path)
        if target in owners or target in annotations.items:
            raise FormatError(target, f"would be the annotation of both {owners.get(target, target)} and {path}")
        owners[target] = path
        outputs[target] = _document(path, annotations.image_sizes.get(path), boxes_for_writing(annotations, path))
    check_outputs(outputs, version)
    return outputs


def _document(path: str, size: tuple[int, int] | None, boxes: list[Box]) -> bytes:
    root = ElementTree.Element("annotation")
    folder, name = posixpath.split(path)
    ElementTree.SubElement(root, "folder").text = posixpath.basename(folder)
    ElementTree.SubElement(root, "filename").text = name
    if size is not None:
        size_element = ElementTree.SubElement(root, "size")
        ElementTree.SubElement(size_element, "width").text = str(size[0])
        ElementTree.SubElement(size_element, "height").text = str(size[1])
    ElementTree.SubElement(root, "segmented").text = "0"
    for box in boxes:
        element = ElementTree.SubElement(root, "object")
        ElementTree.SubElement(element, "name").text = box.label
        for tag, text in (("pose", "Unspecified"), ("truncated", "0"), ("difficult", "0")):
            ElementTree.SubElement(element, tag).text = text
        corners = ElementTree.SubElement(element, "bndbox")
        xmin, ymin = round(box.x) + 1, round(box.y) + 1
        if size is not None:  # a sliver at the far edge still starts on the image's last pixel
            xmin, ymin = min(xmin, size[0]), min(ymin, size[1])
        values = (xmin, ymin, max(round(box.right), xmin), max(round(box.bottom), ymin))
        for tag, value in zip(CORNERS, values):
            ElementTree.SubElement(corners, tag).text = str(value)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode").encode() + b"\n"
