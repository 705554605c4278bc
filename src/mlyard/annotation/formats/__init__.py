"""Label formats, one module each, all with the same two functions:

- `read(files, read_bytes, *, image_sizes=None) -> Annotations`: `files` is the version's list of
  relative paths, `read_bytes(path)` the bytes of one of them or None (the caller bounds it; a
  label file over 64 MiB is refused here too). Formats kept in one file (CSV, COCO, Label
  Studio) also take `path=`, that file, found by name where omitted. `image_sizes` is
  `{path: (width, height)}` from the images' headers: YOLO needs it (its coordinates are
  fractions), the others use it where their files do not state a size.
- `write(annotations, files) -> dict[path, bytes]`: the label files of a child version of
  `files`, which replace the parent's files of the same path. Image folders instead return
  `{new path: source path}`, a relocation of the version's own files (see `imagefolder`).

Anything a label file holds that the format cannot mean (broken JSON or XML, a DTD, a box
outside its image, an unknown category, a path that is absolute, leads up or names no file of
the version) is a `FormatError` naming the file and what is wrong; so is a set of annotations a
format cannot hold (boxes as image folders, several labels where one is allowed).
"""

from __future__ import annotations

from types import ModuleType

from mlyard.annotation.formats import coco, csv_table, imagefolder, label_studio, voc, yolo

FORMATS: dict[str, ModuleType] = {
    "imagefolder": imagefolder,
    "csv": csv_table,
    "coco": coco,
    "yolo": yolo,
    "voc": voc,
    "label-studio": label_studio,
}

__all__ = ["FORMATS", "coco", "csv_table", "imagefolder", "label_studio", "voc", "yolo"]
