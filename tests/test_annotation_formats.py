"""Label formats (`mlyard.annotation.formats`) and annotator agreement: each format's written
files read back as the same labels and boxes; samples laid out as each format's documentation
shows them read as they mean; hostile label files are a FormatError naming the file, never a
crash; kappas against published worked examples and scikit-learn."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest

from mlyard.annotation import Annotations, Box, FormatError, ItemLabels, agreement
from mlyard.annotation.formats import FORMATS, coco, csv_table, imagefolder, label_studio, voc, yolo

Files = dict[str, bytes]


def version(files: dict[str, bytes | str]) -> tuple[list[str], Callable[[str], bytes | None]]:
    """The version's paths and its `read_bytes`."""
    data = {path: content.encode() if isinstance(content, str) else content for path, content in files.items()}
    return sorted(data), data.get


def images(*paths: str) -> dict[str, bytes | str]:
    return {path: b"\xff\xd8 not decoded" for path in paths}


def assert_same(read: Annotations, expected: Annotations, tolerance: float = 0.0) -> None:
    assert sorted(read.items) == sorted(expected.items)
    for path, item in expected.items.items():
        got = read.items[path]
        assert (got.labels, got.text_label) == (item.labels, item.text_label), path
        assert len(got.boxes) == len(item.boxes), path
        for mine, theirs in zip(sorted(got.boxes, key=_order), sorted(item.boxes, key=_order)):
            assert mine.label == theirs.label, path
            for side in ("x", "y", "width", "height"):
                assert getattr(mine, side) == pytest.approx(getattr(theirs, side), abs=tolerance), (path, side)


def _order(box: Box) -> tuple[str, float, float]:
    return box.label, round(box.x), round(box.y)


def round_trip(module: Any, annotations: Annotations, files: dict[str, bytes | str],
               tolerance: float = 0.0) -> tuple[Annotations, Files]:
    paths, _ = version(files)
    written = module.write(annotations, paths)
    child, read_bytes = version({**files, **written})
    read = module.read(child, read_bytes, image_sizes=annotations.image_sizes)
    assert_same(read, annotations, tolerance)
    return read, written


# Boxes at fractional pixels, one touching the image's far corner, an image holding nothing.
BOXES = Annotations("boxes", ("cat", "dog"), {
    "images/train/a.jpg": ItemLabels("images/train/a.jpg", boxes=(
        Box("cat", 10.5, 20.25, 100.0, 50.75), Box("dog", 0.0, 0.0, 640.0, 480.0))),
    "images/val/b.png": ItemLabels("images/val/b.png", boxes=(Box("dog", 3.0, 4.0, 5.0, 6.0),)),
    "images/val/c.png": ItemLabels("images/val/c.png"),
}, {"images/train/a.jpg": (640, 480), "images/val/b.png": (32, 24), "images/val/c.png": (10, 10)})
BOX_FILES = images(*BOXES.items, "README.md")


# --- Round trips ---------------------------------------------------------------------------------

def test_image_folders_relocate_the_labelled_images_and_read_back() -> None:
    files = images("train/x/1.jpg", "train/y/1.jpg", "test/2.png", "loose.jpg", "unlabelled.jpg")
    annotations = Annotations("classification", ("cat", "dog"), {
        "train/x/1.jpg": ItemLabels("train/x/1.jpg", ("cat",)), "train/y/1.jpg": ItemLabels("train/y/1.jpg", ("cat",)),
        "test/2.png": ItemLabels("test/2.png", ("dog",)), "loose.jpg": ItemLabels("loose.jpg", ("dog",)),
        "unlabelled.jpg": ItemLabels("unlabelled.jpg")})
    moves = imagefolder.write(annotations, sorted(files))
    assert moves["train/cat/1.jpg"] == "train/x/1.jpg"
    renamed = next(path for path, source in moves.items() if source == "train/y/1.jpg")
    assert renamed.startswith("train/cat/1-") and renamed.endswith(".jpg")
    assert moves["test/dog/2.png"] == "test/2.png" and moves["dog/loose.jpg"] == "loose.jpg"
    assert "unlabelled.jpg" not in moves.values()
    read = imagefolder.read(sorted(moves))
    assert {path: read.items[new].labels for new, path in moves.items()} == {
        path: item.labels for path, item in annotations.items.items() if item.labels}
    assert read.classes == ("cat", "dog")


def test_a_table_round_trips_single_multi_and_empty_labels() -> None:
    files = images("a.jpg", "b/c.jpg", "d.jpg")
    annotations = Annotations("classification", ("cat", "dog", "outdoor"), {
        "a.jpg": ItemLabels("a.jpg", ("cat",)), "b/c.jpg": ItemLabels("b/c.jpg", ("dog", "outdoor")),
        "d.jpg": ItemLabels("d.jpg")})
    read, written = round_trip(csv_table, annotations, files)
    assert written["labels.csv"] == b"path,label\na.jpg,cat\nb/c.jpg,dog;outdoor\nd.jpg,\n"
    assert read.kind == "classification" and read.classes == annotations.classes


def test_a_table_round_trips_text() -> None:
    annotations = Annotations("text", (), {"a.wav": ItemLabels("a.wav", text_label='she said "hi",\nthen left'),
                                           "b.wav": ItemLabels("b.wav", text_label="ok")})
    read, _ = round_trip(csv_table, annotations, {"a.wav": b"", "b.wav": b""})
    assert read.kind == "text"


def test_coco_round_trips_boxes_image_labels_and_empty_images() -> None:
    annotations = Annotations("boxes", BOXES.classes, {**BOXES.items, "images/val/c.png": ItemLabels(
        "images/val/c.png", ("blurry",))}, BOXES.image_sizes)
    read, written = round_trip(coco, annotations, BOX_FILES)
    document = json.loads(written["annotations.json"])
    assert [category["name"] for category in document["categories"]] == ["cat", "dog", "blurry"]
    assert {entry["area"] for entry in document["annotations"] if "bbox" in entry} >= {100.0 * 50.75}
    assert read.classes == ("cat", "dog", "blurry") and read.image_sizes == BOXES.image_sizes


@pytest.mark.parametrize("layout", ["ultralytics", "beside"])
def test_yolo_round_trips_within_a_pixel(layout: str) -> None:
    annotations = BOXES if layout == "ultralytics" else Annotations("boxes", BOXES.classes, {
        path.removeprefix("images/"): ItemLabels(path.removeprefix("images/"), boxes=item.boxes)
        for path, item in BOXES.items.items()}, {path.removeprefix("images/"): size
                                                 for path, size in BOXES.image_sizes.items()})
    read, written = round_trip(yolo, annotations, images(*annotations.items), tolerance=1.0)
    expected = "labels/train/a.txt" if layout == "ultralytics" else "train/a.txt"
    assert written[expected].decode().splitlines()[1] == "1 0.500000 0.500000 1.000000 1.000000"
    assert written["val/c.txt" if layout == "beside" else "labels/val/c.txt"] == b""
    assert written["classes.txt"] == b"cat\ndog\n"
    if layout == "ultralytics":
        assert b"train: images/train\nval: images/val\n" in written["data.yaml"]
    assert read.classes == ("cat", "dog")


@pytest.mark.parametrize("layout", ["devkit", "beside"])
def test_voc_round_trips_within_a_pixel(layout: str) -> None:
    rename = (lambda path: path.replace("images/train/", "VOC/JPEGImages/")) if layout == "devkit" else (
        lambda path: path)
    annotations = Annotations("boxes", BOXES.classes, {
        rename(path): ItemLabels(rename(path), boxes=item.boxes) for path, item in BOXES.items.items()},
        {rename(path): size for path, size in BOXES.image_sizes.items()})
    read, written = round_trip(voc, annotations, images(*annotations.items), tolerance=1.0)
    assert ("VOC/Annotations/a.xml" if layout == "devkit" else "images/train/a.xml") in written
    assert b"<xmin>1</xmin>" in written["images/val/b.xml"] or b"<xmin>4</xmin>" in written["images/val/b.xml"]
    assert read.image_sizes == annotations.image_sizes


def test_label_studio_round_trips_choices_boxes_and_text() -> None:
    items = dict(BOXES.items)
    items["images/val/c.png"] = ItemLabels("images/val/c.png", ("blurry", "night"), text_label="a line\nanother")
    annotations = Annotations("boxes", ("blurry", "cat", "dog", "night"), items, BOXES.image_sizes)
    read, written = round_trip(label_studio, annotations, BOX_FILES, tolerance=1e-9)
    task = json.loads(written["label-studio.json"])[0]
    assert task["data"]["image"] == "images/train/a.jpg"
    assert task["annotations"][0]["result"][0]["value"]["width"] == pytest.approx(100 * 100 / 640)
    assert read.classes == annotations.classes


def test_every_format_is_registered() -> None:
    assert set(FORMATS) == {"imagefolder", "csv", "coco", "yolo", "voc", "label-studio"}
    assert all(callable(module.read) and callable(module.write) for module in FORMATS.values())


# --- Samples as each format's documentation lays them out --------------------------------------

def test_a_coco_file_as_the_coco_site_shows_it() -> None:
    document = {
        "info": {"description": "COCO 2017 Dataset", "version": "1.0", "year": 2017},
        "licenses": [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/", "id": 1, "name": "BY-NC-SA"}],
        "images": [{"license": 4, "file_name": "000000397133.jpg", "height": 427, "width": 640,
                    "date_captured": "2013-11-14 17:02:52", "id": 397133},
                   {"license": 1, "file_name": "000000037777.jpg", "height": 230, "width": 352, "id": 37777}],
        "annotations": [{"segmentation": [[510.66, 423.01, 511.72, 420.03, 510.45, 423.01]], "area": 702.1057,
                         "iscrowd": 0, "image_id": 397133, "bbox": [473.07, 395.93, 38.65, 28.67],
                         "category_id": 18, "id": 1768},
                        {"segmentation": {"counts": [272, 2, 4], "size": [427, 640]}, "area": 220834,
                         "iscrowd": 1, "image_id": 397133, "bbox": [0, 34, 639, 388], "category_id": 1,
                         "id": 900100397133}],
        "categories": [{"supercategory": "person", "id": 1, "name": "person"},
                       {"supercategory": "animal", "id": 18, "name": "dog"}]}
    paths, read_bytes = version({"annotations/instances_val2017.json": json.dumps(document),
                                 **images("val2017/000000397133.jpg", "val2017/000000037777.jpg")})
    read = coco.read(paths, read_bytes)
    assert read.kind == "boxes" and read.classes == ("person", "dog")
    assert read.items["val2017/000000397133.jpg"].boxes == (Box("dog", 473.07, 395.93, 38.65, 28.67),
                                                            Box("person", 0, 34, 639, 388))
    assert read.items["val2017/000000037777.jpg"] == ItemLabels("val2017/000000037777.jpg")
    assert read.image_sizes["val2017/000000397133.jpg"] == (640, 427)


def test_yolo_files_as_ultralytics_documents_them() -> None:
    data_yaml = "path: ../datasets/coco8\ntrain: images/train\nval: images/val\nnames:\n  0: person\n  1: bicycle\n"
    paths, read_bytes = version({"coco8/data.yaml": data_yaml, **images("coco8/images/train/im0.jpg"),
                                 "coco8/labels/train/im0.txt": "0 0.481719 0.634028 0.690625 0.713278\n"
                                                               "1 0.5 0.5 0.2 0.1\n\n"})
    read = yolo.read(paths, read_bytes, image_sizes={"coco8/images/train/im0.jpg": (640, 480)})
    person, bicycle = read.items["coco8/images/train/im0.jpg"].boxes
    assert read.classes == ("person", "bicycle")
    assert (person.label, person.x, person.y) == ("person", pytest.approx(87.30016), pytest.approx(133.14672))
    assert (person.width, person.height) == (pytest.approx(442.0), pytest.approx(342.37, abs=0.01))
    assert bicycle == Box("bicycle", pytest.approx(256.0), pytest.approx(216.0), pytest.approx(128.0),
                          pytest.approx(48.0))


def test_darknet_labels_beside_their_images_with_obj_names() -> None:
    paths, read_bytes = version({"obj.names": "cat\ndog\n", **images("data/1.jpg", "data/2.jpg", "data/3.jpg"),
                                 "data/1.txt": "1 0.5 0.5 1 1\n", "data/2.txt": ""})
    read = yolo.read(paths, read_bytes, image_sizes={"data/1.jpg": (8, 6)})
    assert read.items == {"data/1.jpg": ItemLabels("data/1.jpg", boxes=(Box("dog", 0, 0, 8, 6),)),
                          "data/2.jpg": ItemLabels("data/2.jpg")}  # 3.jpg has no label file: unlabelled


VOC_000001 = """<annotation>
\t<folder>VOC2007</folder>
\t<filename>000001.jpg</filename>
\t<source>
\t\t<database>The VOC2007 Database</database>
\t\t<annotation>PASCAL VOC2007</annotation>
\t\t<image>flickr</image>
\t\t<flickrid>341012865</flickrid>
\t</source>
\t<owner>
\t\t<flickrid>Fried Camels</flickrid>
\t\t<name>Jinky the Fruit Bat</name>
\t</owner>
\t<size>
\t\t<width>353</width>
\t\t<height>500</height>
\t\t<depth>3</depth>
\t</size>
\t<segmented>0</segmented>
\t<object>
\t\t<name>dog</name>
\t\t<pose>Left</pose>
\t\t<truncated>1</truncated>
\t\t<difficult>0</difficult>
\t\t<bndbox>
\t\t\t<xmin>48</xmin>
\t\t\t<ymin>240</ymin>
\t\t\t<xmax>195</xmax>
\t\t\t<ymax>371</ymax>
\t\t</bndbox>
\t</object>
\t<object>
\t\t<name>person</name>
\t\t<pose>Left</pose>
\t\t<truncated>1</truncated>
\t\t<difficult>0</difficult>
\t\t<bndbox>
\t\t\t<xmin>8</xmin>
\t\t\t<ymin>12</ymin>
\t\t\t<xmax>352</xmax>
\t\t\t<ymax>498</ymax>
\t\t</bndbox>
\t</object>
</annotation>
"""


def test_voc_as_the_pascal_devkit_lays_it_out() -> None:
    paths, read_bytes = version({"VOC2007/Annotations/000001.xml": VOC_000001, "VOC2007/ImageSets/Main/train.txt":
                                 "000001\n", **images("VOC2007/JPEGImages/000001.jpg")})
    read = voc.read(paths, read_bytes)
    assert read.items == {"VOC2007/JPEGImages/000001.jpg": ItemLabels("VOC2007/JPEGImages/000001.jpg", boxes=(
        Box("dog", 47, 239, 148, 132), Box("person", 7, 11, 345, 487)))}
    assert read.image_sizes == {"VOC2007/JPEGImages/000001.jpg": (353, 500)}
    assert read.classes == ("dog", "person")


def test_a_label_studio_export_as_its_documentation_shows_it() -> None:
    export = [{
        "id": 1, "data": {"image": "/data/upload/1/6b2a4f4c-airplane.jpg"},
        "annotations": [{
            "id": 1, "completed_by": 1, "was_cancelled": False, "ground_truth": False,
            "created_at": "2024-03-01T10:00:00.000000Z", "lead_time": 12.3,
            "result": [
                {"original_width": 600, "original_height": 403, "image_rotation": 0,
                 "value": {"x": 4.98, "y": 12.82, "width": 32.52, "height": 44.91, "rotation": 0,
                           "rectanglelabels": ["Airplane"]},
                 "id": "bb1", "from_name": "label", "to_name": "image", "type": "rectanglelabels", "origin": "manual"},
                {"value": {"choices": ["Airbus"]}, "id": "ch1", "from_name": "choice", "to_name": "image",
                 "type": "choices", "origin": "manual"},
                {"value": {"points": [[1, 2], [3, 4], [5, 1]], "polygonlabels": ["Wing"]}, "id": "p1",
                 "from_name": "poly", "to_name": "image", "type": "polygonlabels"}]}],
        "predictions": []},
        {"id": 2, "data": {"image": "/data/local-files/?d=photos%2Fdataset%2Fcar.jpg"},
         "annotations": [{"id": 2, "completed_by": {"id": 3, "email": "ann@example.com"},
                          "result": [{"value": {"choices": ["Car"]}, "type": "choices", "from_name": "choice",
                                      "to_name": "image"}]}]},
        {"id": 3, "data": {"image": "unlabelled.jpg"}, "annotations": []}]
    paths, read_bytes = version({"export.json": json.dumps(export),
                                 **images("airplane.jpg", "dataset/car.jpg", "unlabelled.jpg")})
    read = label_studio.read(paths, read_bytes)
    airplane = read.items["airplane.jpg"]
    assert airplane.labels == ("Airbus",) and len(airplane.boxes) == 1
    box = airplane.boxes[0]
    assert (box.x, box.y, box.width, box.height) == (pytest.approx(29.88), pytest.approx(51.6646),
                                                     pytest.approx(195.12), pytest.approx(180.9873))
    assert read.items["dataset/car.jpg"].labels == ("Car",) and "unlabelled.jpg" not in read.items
    assert read.kind == "boxes" and read.image_sizes == {"airplane.jpg": (600, 403)}
    assert set(label_studio.read_annotators(paths, read_bytes)) == {"1", "ann@example.com"}


def test_an_image_folder_as_torchvision_reads_it() -> None:
    paths, _ = version({**images("train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.jpg", "bird/4.png"),
                        "README.md": "", "train/cat/notes.txt": ""})
    read = imagefolder.read(paths)
    assert {path: item.labels for path, item in read.items.items()} == {
        "train/cat/1.jpg": ("cat",), "train/dog/2.jpg": ("dog",), "val/cat/3.jpg": ("cat",), "bird/4.png": ("bird",)}


def test_a_kaggle_style_table_with_paths_relative_to_an_image_folder() -> None:
    paths, read_bytes = version({"train.csv": "id,image,label\n1,./a.jpg,cat\n2,b.jpg, dog \n3,b.jpg,pet\n",
                                 **images("images/a.jpg", "images/b.jpg")})
    read = csv_table.read(paths, read_bytes)
    assert {path: item.labels for path, item in read.items.items()} == {
        "images/a.jpg": ("cat",), "images/b.jpg": ("dog", "pet")}


# --- Hostile input -------------------------------------------------------------------------------

COCO_OK = {"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 10}],
           "categories": [{"id": 1, "name": "cat"}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 2, 2]}]}


def coco_with(**changes: Any) -> str:
    document = json.loads(json.dumps(COCO_OK))
    for key, value in changes.items():
        section, _, field = key.partition("__")
        document[section][0][field] = value
    return json.dumps(document)


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<annotation><filename>&lol9;</filename></annotation>"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE a [<!ENTITY secret SYSTEM "file:///etc/passwd">]><annotation><filename>&secret;</filename></annotation>"""


def voc_box(xmin: str, ymin: str, xmax: str, ymax: str, filename: str = "a.jpg") -> str:
    return (f"<annotation><filename>{filename}</filename><size><width>10</width><height>10</height></size>"
            f"<object><name>cat</name><bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin><xmax>{xmax}</xmax>"
            f"<ymax>{ymax}</ymax></bndbox></object></annotation>")


def ls_task(image: object = "a.jpg", **value: Any) -> str:
    result = {"type": "rectanglelabels", "original_width": 10, "original_height": 10,
              "value": {"x": 10, "y": 10, "width": 20, "height": 20, "rectanglelabels": ["cat"], **value}}
    return json.dumps([{"data": {"image": image}, "annotations": [{"result": [result]}]}])


YAML_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\nnames: *d\n"

HOSTILE = [
    # (case, format, files besides a.jpg, the file the error names, words of the error)
    ("coco broken JSON", coco, {"c.json": '{"images": ['}, "c.json", "not JSON"),
    ("coco nested too deep", coco, {"c.json": "[" * 200_000}, "c.json", "JSON"),
    ("coco not COCO", coco, {"c.json": '{"images": []}'}, "c.json", "is not COCO"),
    ("coco unknown category", coco, {"c.json": coco_with(annotations__category_id=7)}, "c.json", "category_id 7"),
    ("coco unknown image", coco, {"c.json": coco_with(annotations__image_id=2)}, "c.json", "image_id 2"),
    ("coco negative box", coco, {"c.json": coco_with(annotations__bbox=[-5, 1, 2, 2])}, "c.json", "negative"),
    ("coco box past the edge", coco, {"c.json": coco_with(annotations__bbox=[5, 5, 8, 2])}, "c.json", "edge"),
    ("coco box of no width", coco, {"c.json": coco_with(annotations__bbox=[5, 5, 0, 2])}, "c.json", "positive"),
    ("coco NaN box", coco, {"c.json": coco_with(annotations__bbox=[float("nan"), 1, 2, 2])}, "c.json", "finite"),
    ("coco short bbox", coco, {"c.json": coco_with(annotations__bbox=[1, 1, 2])}, "c.json", "[x, y, width, height]"),
    ("coco absolute path", coco, {"c.json": coco_with(images__file_name="/etc/passwd")}, "c.json", "absolute"),
    ("coco windows path", coco, {"c.json": coco_with(images__file_name="C:\\a.jpg")}, "c.json", "absolute"),
    ("coco path up", coco, {"c.json": coco_with(images__file_name="../a.jpg")}, "c.json", "leading up"),
    ("coco unknown file", coco, {"c.json": coco_with(images__file_name="b.jpg")}, "c.json", "not a file of the"),
    ("coco huge integer", coco, {"c.json": coco_with(images__width=10 ** 30)}, "c.json", "size in pixels"),
    ("coco non-text label", coco, {"c.json": coco_with(categories__name=["cat"])}, "c.json", "label is text"),
    ("csv path up", csv_table, {"labels.csv": "path,label\n../../etc/passwd,cat\n"}, "labels.csv", "leading up"),
    ("csv absolute path", csv_table, {"labels.csv": "path,label\n/etc/passwd,cat\n"}, "labels.csv", "absolute"),
    ("csv unknown file", csv_table, {"labels.csv": "path,label\nb.jpg,cat\n"}, "labels.csv", "not a file"),
    ("csv no header", csv_table, {"labels.csv": "a.jpg,cat\n"}, "labels.csv", "header"),
    ("csv not UTF-8", csv_table, {"labels.csv": b"path,label\na.jpg,\xff\xfe\n"}, "labels.csv", "UTF-8"),
    ("csv field too large", csv_table, {"labels.csv": "path,label\na.jpg,\"" + "x" * 200_000 + "\"\n"},
     "labels.csv", "not CSV"),
    ("csv control character", csv_table, {"labels.csv": "path,label\na.jpg,c\x01t\n"}, "labels.csv", "control"),
    ("yolo unknown class", yolo, {"classes.txt": "cat\n", "a.txt": "3 0.5 0.5 0.1 0.1\n"}, "a.txt", "class id"),
    ("yolo negative class", yolo, {"classes.txt": "cat\n", "a.txt": "-1 0.5 0.5 0.1 0.1\n"}, "a.txt", "class id"),
    ("yolo short line", yolo, {"classes.txt": "cat\n", "a.txt": "0 0.5 0.5 0.1\n"}, "a.txt", "a line is"),
    ("yolo past the edge", yolo, {"classes.txt": "cat\n", "a.txt": "0 0.9 0.5 0.5 0.1\n"}, "a.txt", "edge"),
    ("yolo not a fraction", yolo, {"classes.txt": "cat\n", "a.txt": "0 5 5 1 1\n"}, "a.txt", "fraction"),
    ("yolo infinity", yolo, {"classes.txt": "cat\n", "a.txt": "0 inf 0.5 0.1 0.1\n"}, "a.txt", "finite"),
    ("yolo no names", yolo, {"a.txt": "0 0.5 0.5 0.1 0.1\n"}, None, "no class names"),
    ("yolo YAML bomb", yolo, {"data.yaml": YAML_BOMB, "a.txt": ""}, "data.yaml", "label is text"),
    ("yolo broken YAML", yolo, {"data.yaml": "names: [a, b\n", "a.txt": ""}, "data.yaml", "not YAML"),
    ("yolo YAML names not a list", yolo, {"data.yaml": "names: cat\n", "a.txt": ""}, "data.yaml", "names"),
    ("voc billion laughs", voc, {"a.xml": BILLION_LAUGHS}, "a.xml", "refused"),
    ("voc external entity", voc, {"a.xml": EXTERNAL_ENTITY}, "a.xml", "refused"),
    ("voc unknown encoding", voc, {"a.xml": '<?xml version="1.0" encoding="bogus"?><annotation/>'}, "a.xml",
     "not XML"),
    ("voc broken XML", voc, {"a.xml": "<annotation><filename>a.jpg</annotation>"}, "a.xml", "not XML"),
    ("voc wrong root", voc, {"a.xml": "<svg/>"}, "a.xml", "root is <svg>"),
    ("voc no filename", voc, {"a.xml": "<annotation/>"}, "a.xml", "<filename>"),
    ("voc absolute filename", voc, {"a.xml": voc_box("1", "1", "2", "2", "/etc/passwd")}, "a.xml", "absolute"),
    ("voc filename up", voc, {"a.xml": voc_box("1", "1", "2", "2", "../a.jpg")}, "a.xml", "leading up"),
    ("voc corners crossed", voc, {"a.xml": voc_box("5", "5", "2", "8")}, "a.xml object 1", "positive"),
    ("voc past the edge", voc, {"a.xml": voc_box("1", "1", "30", "8")}, "a.xml object 1", "edge"),
    ("voc negative", voc, {"a.xml": voc_box("-9", "1", "3", "8")}, "a.xml object 1", "negative"),
    ("voc not a number", voc, {"a.xml": voc_box("one", "1", "3", "8")}, "a.xml object 1", "xmin"),
    ("label studio not a list", label_studio, {"e.json": "{}"}, "e.json", "list of tasks"),
    ("label studio URL", label_studio, {"e.json": ls_task("https://example.com/a.jpg")}, "e.json task 0", "URL"),
    ("label studio absolute", label_studio, {"e.json": ls_task("/etc/a.jpg")}, "e.json task 0", "absolute"),
    ("label studio local files up", label_studio, {"e.json": ls_task("/data/local-files/?d=../../a.jpg")},
     "e.json task 0", "leading up"),
    ("label studio rotated", label_studio, {"e.json": ls_task(rotation=30)}, "e.json task 0", "rotated"),
    ("label studio past the edge", label_studio, {"e.json": ls_task(x=95)}, "e.json task 0", "edge"),
    ("label studio negative", label_studio, {"e.json": ls_task(width=-20)}, "e.json task 0", "positive"),
    ("label studio labels not a list", label_studio, {"e.json": ls_task(rectanglelabels="cat")}, "e.json task 0",
     "rectanglelabels"),
]


@pytest.mark.parametrize(("module", "files", "source", "words"), [case[1:] for case in HOSTILE],
                         ids=[case[0] for case in HOSTILE])
def test_hostile_label_files_are_a_format_error_naming_the_file(module: Any, files: dict[str, Any],
                                                                source: str | None, words: str) -> None:
    paths, read_bytes = version({**images("a.jpg"), **files})
    with pytest.raises(FormatError) as raised:
        module.read(paths, read_bytes, image_sizes={"a.jpg": (10, 10)})
    assert isinstance(raised.value, ValueError)
    assert raised.value.path == source if source is None else raised.value.path.startswith(source), str(raised.value)
    assert words in str(raised.value)


MUTATIONS = [b"-", b"1e999", b"..", b"/", b"\0", b"[", b"{", b"<", b"&", b'"', b"9" * 30, b"\n", b";"]


@pytest.mark.parametrize("name", ["coco", "csv", "yolo", "voc", "label-studio"])
def test_label_files_with_bytes_changed_at_random_never_crash(name: str) -> None:
    rng = random.Random(name)
    module = FORMATS[name]
    annotations = BOXES if name != "csv" else Annotations("classification", ("cat", "dog"), {
        path: ItemLabels(path, ("cat", "dog")) for path in BOXES.items})
    written = module.write(annotations, sorted(BOX_FILES))
    for _ in range(300):
        files = {**BOX_FILES, **written}
        target = rng.choice(sorted(written))
        content = bytearray(files[target])
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(content) + 1)
            content[at:at + rng.randint(0, 3)] = rng.choice(MUTATIONS + [bytes([rng.randrange(256)])])
        files[target] = bytes(content)
        paths, read_bytes = version(files)
        try:
            module.read(paths, read_bytes, image_sizes=BOXES.image_sizes)
        except FormatError:
            pass


def test_a_box_passing_the_edge_by_rounding_is_clipped() -> None:
    paths, read_bytes = version({**images("a.jpg"), "c.json": coco_with(annotations__bbox=[-0.4, 2, 10.3, 8.5])})
    assert coco.read(paths, read_bytes).items["a.jpg"].boxes == (Box("cat", 0, 2, 9.9, 8),)


@pytest.mark.parametrize("module", [csv_table, coco, label_studio, voc])
def test_label_files_over_64_mib_or_unreadable_are_refused(module: Any) -> None:
    name = {csv_table: "labels.csv", voc: "a.xml"}.get(module, "a.json")
    paths, _ = version({**images("a.jpg"), name: b""})
    huge = b" " * (64 * 1024 * 1024 + 1)
    with pytest.raises(FormatError, match="over 64 MiB"):
        module.read(paths, lambda path: huge if path == name else None)
    with pytest.raises(FormatError, match="cannot be read"):
        module.read(paths, lambda path: None)


def test_yolo_needs_the_size_of_an_image_with_boxes() -> None:
    paths, read_bytes = version({**images("a.jpg"), "classes.txt": "cat\n", "a.txt": "0 0.5 0.5 0.1 0.1\n"})
    with pytest.raises(FormatError, match="size of a.jpg is unknown"):
        yolo.read(paths, read_bytes)


def test_two_json_files_need_naming_and_a_named_one_must_exist() -> None:
    paths, read_bytes = version({**images("a.jpg"), "one.json": json.dumps(COCO_OK), "two.json": "[]"})
    with pytest.raises(FormatError, match="name it"):
        coco.read(paths, read_bytes)
    assert coco.read(paths, read_bytes, path="one.json").items["a.jpg"].boxes
    with pytest.raises(FormatError, match="not a file of the version"):
        label_studio.read(paths, read_bytes, path="../three.json")


# --- What a format cannot hold -------------------------------------------------------------------

def labelled(*labels: str, path: str = "a.jpg") -> Annotations:
    return Annotations("classification", labels, {path: ItemLabels(path, labels)})


@pytest.mark.parametrize(("module", "annotations", "words"), [
    (imagefolder, BOXES, "classification annotations, not boxes"),
    (imagefolder, labelled("cat", "dog"), "one class per image"),
    (imagefolder, labelled("train"), "split's name"),
    (imagefolder, labelled("a/b"), "folder's name"),
    (imagefolder, labelled("cat", path="a.txt"), "not an image"),
    (csv_table, labelled("cat;dog"), "separates labels"),
    (csv_table, BOXES, "not boxes"),
    (yolo, labelled("cat"), "not classification"),
    (voc, Annotations("boxes", (), {"a.jpg": ItemLabels("a.jpg", ("cat",))}), "not labels of whole images"),
    (coco, Annotations("boxes", (), {"a.jpg": ItemLabels("a.jpg", boxes=(Box("cat", 1, 1, 2, 2),))}),
     "size is unknown"),
    (coco, Annotations("boxes", (), {"a.jpg": ItemLabels("a.jpg", boxes=(Box("cat", 5, 5, 9, 2),))},
                       {"a.jpg": (10, 10)}), "edge"),
    (label_studio, labelled("cat", path="elsewhere.jpg"), "not a file of the version"),
])
def test_writing_what_a_format_cannot_hold_is_a_format_error(module: Any, annotations: Annotations,
                                                             words: str) -> None:
    paths, _ = version({**images("a.jpg", *annotations.items), "a.txt": ""} if "elsewhere.jpg" not in
                       annotations.items else images("a.jpg"))
    with pytest.raises(FormatError, match=words):
        module.write(annotations, paths)


def test_a_written_file_never_stands_where_the_version_has_a_folder() -> None:
    paths, _ = version({**images("a.jpg"), "labels.csv/old.txt": ""})
    with pytest.raises(FormatError, match="where the version has a folder"):
        csv_table.write(labelled("cat"), paths)


def test_two_images_of_one_stem_cannot_share_a_yolo_label_file() -> None:
    annotations = Annotations("boxes", ("cat",), {path: ItemLabels(path) for path in ("a.jpg", "a.png")})
    with pytest.raises(FormatError, match="label file of both"):
        yolo.write(annotations, sorted(images("a.jpg", "a.png")))


# --- Agreement -----------------------------------------------------------------------------------

# Wikipedia's worked example of Fleiss' kappa: 10 subjects, 14 raters each, 5 categories.
FLEISS_TABLE = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]


def ratings_of(table: list[list[int]]) -> dict[str, dict[str, str]]:
    ratings = {}
    for subject, row in enumerate(table):
        categories = [str(category + 1) for category, count in enumerate(row) for _ in range(count)]
        ratings[f"subject {subject}"] = {f"rater {rater}": category for rater, category in enumerate(categories)}
    return ratings


def test_fleiss_kappa_of_the_worked_example() -> None:
    ratings = ratings_of(FLEISS_TABLE)
    assert agreement.fleiss_kappa(ratings) == pytest.approx(0.210, abs=0.0005)
    assert agreement.percent_agreement(ratings) == pytest.approx(0.378, abs=0.0005)  # P̄ of the example
    report = agreement.report(ratings)
    assert report["kappa_measure"] == "fleiss" and report["items"] == 10 and len(report["annotators"]) == 14


def test_fleiss_kappa_of_two_raters_is_scotts_pi() -> None:
    rng = random.Random(4)
    ratings = {f"i{n}": {"a": rng.choice("xyz"), "b": rng.choice("xyy")} for n in range(200)}
    observed = sum(item["a"] == item["b"] for item in ratings.values()) / 200
    shares = [sum(list(item.values()).count(c) for item in ratings.values()) / 400 for c in "xyz"]
    chance = sum(share ** 2 for share in shares)
    assert agreement.fleiss_kappa(ratings) == pytest.approx((observed - chance) / (1 - chance))


def test_cohen_kappa_of_the_worked_example_and_against_scikit_learn() -> None:
    # Wikipedia's example: 50 proposals, both yes 20, only A yes 5, only B yes 10, both no 15: κ = 0.4.
    pairs = [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15
    ratings = {f"p{n}": {"A": first, "B": second} for n, (first, second) in enumerate(pairs)}
    assert agreement.cohen_kappa(ratings) == pytest.approx(0.4)
    assert agreement.percent_agreement(ratings) == pytest.approx(0.7)
    assert agreement.class_agreement(ratings) == {"yes": pytest.approx(40 / 55), "no": pytest.approx(30 / 45)}
    cohen_kappa_score = pytest.importorskip("sklearn.metrics").cohen_kappa_score
    rng = random.Random(7)
    many = {f"i{n}": {"A": rng.choice("abcd"), "B": rng.choice("abbc")} for n in range(300)}
    many["only A"] = {"A": "a"}
    first = [item["A"] for item in many.values() if "B" in item]
    second = [item["B"] for item in many.values() if "B" in item]
    assert agreement.cohen_kappa(many) == pytest.approx(cohen_kappa_score(first, second))
    assert agreement.report(many)["kappa_measure"] == "cohen"


def test_kappas_where_chance_agreement_is_certain_are_none() -> None:
    ratings = {f"i{n}": {"a": "x", "b": "x", "c": "x"} for n in range(5)}
    assert agreement.fleiss_kappa(ratings) is None and agreement.percent_agreement(ratings) == 1.0
    assert agreement.cohen_kappa({"i": {"a": "x", "b": "x"}}) is None
    assert agreement.fleiss_kappa({"i": {"a": "x"}}) is None  # no item rated twice


def test_cohen_kappa_is_for_two_annotators() -> None:
    with pytest.raises(agreement.AgreementError, match="two annotators"):
        agreement.cohen_kappa({"i": {"a": "x", "b": "x", "c": "y"}})


def test_cohen_kappa_without_scikit_learn_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)
    with pytest.raises(agreement.AgreementError, match="scikit-learn"):
        agreement.cohen_kappa({"i": {"a": "x", "b": "y"}})


def test_each_annotator_against_the_majority_of_the_others() -> None:
    ratings = {"1": {"a": "x", "b": "x", "c": "x"}, "2": {"a": "x", "b": "y", "c": "y"},
               "3": {"a": "y", "b": "x", "c": "z"}, "4": {"a": "x"}}
    # On item 2 a stands against b and c, whose others tie; item 3's others tie for everyone;
    # item 4 has no others.
    assert agreement.majority_agreement(ratings) == {"a": 0.5, "b": 1.0, "c": 1.0}
    assert agreement.majority_agreement({"1": {"a": "x", "b": "x", "c": "x", "d": "y"}}) == {
        "a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}


def test_ratings_from_label_studio_annotators() -> None:
    results = {"ann": ["cat", "dog", "cat"], "bob": ["cat", "cat", "cat"]}
    export = [{"data": {"image": f"{n}.jpg"}, "annotations": [
        {"completed_by": {"email": name}, "result": [{"type": "choices", "value": {"choices": [labels[n]]}}]}
        for name, labels in results.items()]} for n in range(3)]
    paths, read_bytes = version({"e.json": json.dumps(export), **images("0.jpg", "1.jpg", "2.jpg")})
    ratings = agreement.ratings_from(label_studio.read_annotators(paths, read_bytes))
    assert ratings == {f"{n}.jpg": {"ann": results["ann"][n], "bob": "cat"} for n in range(3)}
    assert agreement.percent_agreement(ratings) == pytest.approx(2 / 3)
    with pytest.raises(agreement.AgreementError, match="boxes"):
        agreement.ratings_from({"a": BOXES})
