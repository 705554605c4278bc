"""Label counts of a version: from a labels table, from COCO annotations, from image folders,
and none from files that only look like them."""

from __future__ import annotations

import hashlib
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from mlyard.server.services.datasets.labels import MAX_LABEL_FILE_BYTES, label_counts


@dataclass
class File:
    path: str
    digest: str
    size: int
    media_type: str | None


def version(tmp_path: Path, files: dict[str, bytes]) -> tuple[list[File], object]:
    """The entries of a version of `files`, and its blob_path."""
    store = tmp_path / "blobs"
    store.mkdir(exist_ok=True)
    entries = []
    for path, content in sorted(files.items()):
        digest = hashlib.sha256(content).hexdigest()
        (store / digest).write_bytes(content)
        entries.append(File(path, digest, len(content), mimetypes.guess_type(path)[0]))
    return entries, lambda digest: store / digest


def test_a_labels_table_counts_its_rows_by_label(tmp_path: Path) -> None:
    table = "filename,label\na.png,cat\nb.png,dog\nc.png,cat\nd.png,\n".encode()
    entries, blob_path = version(tmp_path, {"labels.csv": table, "a.png": b"a", "b.png": b"b"})
    assert label_counts(entries, blob_path) == {"source": "table labels.csv", "counts": {"cat": 2, "dog": 1}}


def test_coco_annotations_count_by_category_name(tmp_path: Path) -> None:
    coco = {"images": [{"id": 1, "file_name": "a.jpg"}], "categories": [{"id": 1, "name": "person"},
                                                                          {"id": 2, "name": "bicycle"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1}, {"id": 2, "image_id": 1, "category_id": 1},
                            {"id": 3, "image_id": 1, "category_id": 2}, {"id": 4, "image_id": 1, "category_id": 9}]}
    entries, blob_path = version(tmp_path, {"annotations/instances.json": json.dumps(coco).encode(),
                                            "images/a.jpg": b"a"})
    assert label_counts(entries, blob_path) == {"source": "COCO annotations/instances.json",
                                                "counts": {"person": 2, "bicycle": 1}}


def test_image_folders_count_by_class_and_split(tmp_path: Path) -> None:
    entries, blob_path = version(tmp_path, {
        "train/cat/1.png": b"1", "train/cat/2.png": b"2", "train/dog/3.png": b"3", "test/dog/4.png": b"4",
        "README.md": b"# pets", "train/cat/notes.txt": b"not an image"})
    assert label_counts(entries, blob_path) == {
        "source": "image folders", "counts": {"cat": 2, "dog": 2},
        "splits": {"test": {"dog": 1}, "train": {"cat": 2, "dog": 1}}}


def test_files_that_carry_no_labels_give_none(tmp_path: Path) -> None:
    entries, blob_path = version(tmp_path, {
        "labels.csv": b"no,header,we,know\n1,2,3,4\n", "broken.json": b"{not json", "other.json": b'{"images": []}',
        "photos/a.png": b"a", "photos/b.png": b"b", "train/a.png": b"c"})
    assert label_counts(entries, blob_path) is None


def test_a_table_past_the_size_limit_is_not_read(tmp_path: Path) -> None:
    entries, blob_path = version(tmp_path, {"labels.csv": b"path,label\na,x\n"})
    entries[0].size = MAX_LABEL_FILE_BYTES + 1
    assert label_counts(entries, blob_path) is None
