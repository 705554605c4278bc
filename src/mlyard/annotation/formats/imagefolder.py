"""Image folders: each image at `CLASS/file` or `SPLIT/CLASS/file` (SPLIT one of train, val,
test and their synonyms), as torchvision's `ImageFolder` and Keras'
`image_dataset_from_directory` read them. The labels are the folder names, so reading needs no
file's bytes.

Writing moves images rather than making bytes: `write` returns a relocation map
`{new path: source path}` of the version's own files, so that the child version is made from the
parent's blobs (nothing uploaded, nothing copied). The map holds the labelled images only; an
image keeps the split folder it lay in, and of two images with the same name in one class folder
the later (by source path) gets a suffix from its source path's hash.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable

from mlyard.annotation.formats.common import Reader, Sizes, check_writable, checked_label, sizes_of
from mlyard.annotation.model import Annotations, FormatError, ItemLabels
from mlyard.cleaning.labels import SPLITS, folder_classes, is_image, split_of

NAME = "ImageFolder"


def read(files: Iterable[str], read_bytes: Reader | None = None, *, image_sizes: Sizes | None = None) -> Annotations:
    """One class per image from its folder; FormatError where no image lies at CLASS/file."""
    items: dict[str, ItemLabels] = {}
    for path, _split, folder in folder_classes(path for path in files if is_image(path)):
        items[path] = ItemLabels(path, (checked_label(folder, path),))
    if not items:
        raise FormatError(None, "no image lies at CLASS/file or SPLIT/CLASS/file")
    classes = tuple(sorted({item.labels[0] for item in items.values()}))
    return Annotations("classification", classes, items, sizes_of(items, {}, image_sizes))


def write(annotations: Annotations, files: Iterable[str]) -> dict[str, str]:
    """`{new path: source path}` placing each labelled image in its class's folder (see above)."""
    check_writable(annotations, files, ("classification",), NAME)
    moves: dict[str, str] = {}
    for path in sorted(annotations.items):
        item = annotations.items[path]
        if not item.labels:
            continue
        if len(item.labels) > 1:
            raise FormatError(path, f"holds {len(item.labels)} labels: an image folder holds one class per image")
        if not is_image(path):
            raise FormatError(path, "is not an image: image folders hold images")
        split = path.partition("/")[0] if split_of(path) else None
        target = _place(split, _folder_name(item.labels[0], path), path, moves)
        moves[target] = path
    return moves


def _folder_name(label: str, path: str) -> str:
    if "/" in label or "\\" in label or label in (".", ".."):
        raise FormatError(path, f"the class {label!r:.100} cannot be a folder's name")
    return label


def _place(split: str | None, folder: str, path: str, taken: dict[str, str]) -> str:
    if split is None and folder.lower() in SPLITS:
        # A top-level folder named like a split is read as a split, not a class.
        raise FormatError(path, f"the class {folder!r} is a split's name: it cannot be a top-level folder")
    name = posixpath.basename(path)
    target = posixpath.join(*([split] if split else []), folder, name)
    if target in taken:
        stem, extension = posixpath.splitext(name)
        suffix = hashlib.sha256(path.encode()).hexdigest()[:8]
        target = posixpath.join(posixpath.dirname(target), f"{stem}-{suffix}{extension}")
        if target in taken:
            raise FormatError(path, f"two images would both be {target}")
    return target
