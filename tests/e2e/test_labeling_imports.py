"""Labeling tasks pre-filled from the labels their version carries, through the real server: for
each format, a version holding labels in it makes a task whose items start from them, and an
export with nobody annotating gives the same labels back, read by the format's own `read`; an
import the task cannot hold is refused naming `prefill`; two annotators' agreement is computed
on the task and recorded by its export; the Label Studio download is a file of the task's labels."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import RunningServer
from test_datasets import unique
from test_labeling import api, token_of
from test_projects import person

from mlyard.annotation.formats import coco, csv_table, imagefolder, label_studio, voc, yolo
from mlyard.annotation.model import Annotations, ItemLabels

pytestmark = pytest.mark.slow
SIDE = 32


@dataclass
class World:
    server: RunningServer
    project: str
    annotators: tuple[str, str]
    tokens: dict[str, str]
    folder: Path

    def http(self, who: int = 0) -> httpx.Client:
        return api(self.server, self.tokens[self.annotators[who]])


@pytest.fixture(scope="module")
def world(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One project and two annotators for the module's tests, on the session's server."""
    folder = tmp_path_factory.mktemp("imports")
    suffix = unique("imp")[4:]
    project = f"imp-{suffix}"
    server.cli("projects", "add", project, check=True)
    names = (f"ann-{suffix}", f"bob-{suffix}")
    for name in names:
        person(server, name, folder, {project: "member"})
    yield World(server=server, project=project, annotators=names,
                tokens={name: token_of(server, name) for name in names}, folder=folder)


def draw(folder: Path, paths: Iterable[str]) -> None:
    from PIL import Image

    for index, path in enumerate(paths):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (SIDE, SIDE), (index * 40 % 256, 90, 200 - index * 20)).save(folder / path)


def push(world: World, folder: Path) -> str:
    name = unique("imports")
    world.server.cli_json("datasets", "push", f"{world.project}/{name}", str(folder))
    return name


def create(world: World, dataset: str, kind: str, classes: str, prefill: str | None, *, per_item: int = 1) -> dict:
    arguments = ["label", "create", unique("task"), "--dataset", f"{world.project}/{dataset}", "--kind", kind,
                 "--classes", classes, "--annotators", ",".join(world.annotators), "--per-item", str(per_item)]
    return world.server.cli_json(*arguments, *(["--prefill", prefill] if prefill else []))


def read_folder(module, folder: Path, **options) -> Annotations:
    files = {path.relative_to(folder).as_posix(): path for path in folder.rglob("*") if path.is_file()}
    return module.read(sorted(files), lambda path: files[path].read_bytes() if path in files else None, **options)


def sizes(folder: Path) -> dict[str, tuple[int, int]]:
    return {path.relative_to(folder).as_posix(): (SIDE, SIDE) for path in folder.rglob("*.png")}


def labels_of(annotations: Annotations) -> dict[str, tuple]:
    """Items as comparable values: sorted labels and boxes (rounded: percentages and fractions
    pass through floating point)."""
    return {path: (tuple(sorted(item.labels)),
                   tuple(sorted((box.label, round(box.x, 3), round(box.y, 3), round(box.width, 3),
                                 round(box.height, 3)) for box in item.boxes)))
            for path, item in annotations.items.items()}


def exported(world: World, task: dict, layout: str, module, into: str, **options) -> Annotations:
    """The task exported as `layout` with nobody annotating, pulled, read back by `module`."""
    with world.http() as http:
        made = http.post(f"/labeling/tasks/{task['id']}/export", json={"format": layout})
    assert made.status_code == 201, made.text
    version = made.json()["version"]
    target = world.folder / into
    world.server.cli("datasets", "pull", f"{world.project}/{version['dataset']}:{version['version']}", str(target),
                     check=True)
    return read_folder(module, target, **({"image_sizes": sizes(target)} if module is yolo else {}), **options)


def round_trip(world: World, source: Path, module, *, kind: str, classes: str, prefill: str, layout: str,
               **options) -> dict:
    imported = read_folder(module, source, **options)
    task = create(world, push(world, source), kind, classes, prefill)
    assert task["prefilled"] == len(imported.items), task
    back = exported(world, task, layout, module, f"{layout}-{task['id']}")
    assert labels_of(back) == labels_of(imported)
    return task


def test_image_folders_prefill_a_task_and_an_annotation_overrides_its_prefill(world: World) -> None:
    source = world.folder / "folders"
    draw(source, [f"{split}/{label}/{index}.png" for index, (split, label) in enumerate(
        [("train", "cat"), ("train", "dog"), ("train", "cat"), ("val", "dog"), ("val", "cat"), ("val", "dog")])])
    task = round_trip(world, source, imagefolder, kind="classification", classes="cat,dog", prefill="imagefolder",
                      layout="imagefolder")
    with world.http() as http:
        first = http.get(f"/labeling/tasks/{task['id']}/next").json()
        assert (first["path"], first["prefill"]) == ("train/cat/0.png", {"labels": ["cat"], "boxes": []})
        http.put(f"/labeling/tasks/{task['id']}/items/{first['id']}/annotation",
                 json={"labels": ["dog"]}).raise_for_status()
    table = labels_of(exported(world, task, "csv", csv_table, "overridden"))
    assert table["train/cat/0.png"] == (("dog",), ()) and table["val/cat/4.png"] == (("cat",), ())


def test_a_labels_table_prefills_a_multilabel_task(world: World) -> None:
    source = world.folder / "table"
    paths = [f"img/{index}.png" for index in range(6)]
    draw(source, paths)
    chosen = [("cat",), ("cat", "outdoor"), ("dog",), ("dog", "outdoor"), ("outdoor",), ()]
    table = csv_table.write(Annotations("classification", ("cat", "dog", "outdoor"),
                                        {path: ItemLabels(path, labels) for path, labels in zip(paths, chosen)}), paths)
    (source / "labels.csv").write_bytes(table["labels.csv"])
    round_trip(world, source, csv_table, kind="multilabel", classes="cat,dog,outdoor", prefill="csv:labels.csv",
               layout="csv")


def test_coco_boxes_prefill_a_task(world: World) -> None:
    source = world.folder / "coco"
    draw(source, [f"img/{index}.png" for index in range(6)])
    boxes = [(1, 1, [2, 3, 10, 12]), (1, 2, [0, 0, 32, 16]), (2, 1, [5, 5, 4, 4]), (3, 2, [1, 2, 3, 4]),
             (4, 1, [10, 10, 20, 20]), (4, 1, [0, 0, 8, 8])]  # image 6 holds nothing
    (source / "annotations.json").write_text(json.dumps({
        "images": [{"id": index + 1, "file_name": f"img/{index}.png", "width": SIDE, "height": SIDE}
                   for index in range(6)],
        "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
        "annotations": [{"id": number, "image_id": image, "category_id": category, "bbox": bbox, "iscrowd": 0}
                        for number, (image, category, bbox) in enumerate(boxes, start=1)]}))
    round_trip(world, source, coco, kind="boxes", classes="cat,dog", prefill="coco", layout="coco")


def test_yolo_boxes_prefill_a_task(world: World) -> None:
    source = world.folder / "yolo"
    draw(source, [f"images/train/{index}.png" for index in range(6)])
    (source / "data.yaml").write_text(yaml.safe_dump({"train": "images/train", "names": ["cat", "dog"]}))
    lines = ["0 0.5 0.5 0.25 0.25\n1 0.25 0.25 0.5 0.5\n", "1 0.75 0.5 0.5 1\n", "", "0 0.125 0.125 0.25 0.25\n",
             "1 0.5 0.5 1 1\n"]  # image 5 has no label file: unlabelled
    for index, text in enumerate(lines):
        (source / "labels" / "train").mkdir(parents=True, exist_ok=True)
        (source / "labels" / "train" / f"{index}.txt").write_text(text)
    imported = read_folder(yolo, source, image_sizes=sizes(source))
    task = create(world, push(world, source), "boxes", "cat,dog", "yolo")
    assert task["prefilled"] == 5
    assert labels_of(exported(world, task, "yolo", yolo, "yolo-back")) == labels_of(imported)


def test_voc_boxes_prefill_a_task(world: World) -> None:
    source = world.folder / "voc"
    draw(source, [f"JPEGImages/{index}.png" for index in range(6)])
    corners = [[("cat", 3, 4, 12, 15)], [("dog", 1, 1, 32, 32), ("cat", 5, 5, 6, 6)], [], [("dog", 10, 2, 20, 9)],
               [("cat", 1, 1, 1, 1)]]
    for index, boxes in enumerate(corners):
        objects = "".join(f"<object><name>{name}</name><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax>"
                          f"<ymax>{y2}</ymax></bndbox></object>" for name, x1, y1, x2, y2 in boxes)
        (source / "Annotations").mkdir(exist_ok=True)
        (source / "Annotations" / f"{index}.xml").write_text(
            f"<annotation><filename>{index}.png</filename><size><width>{SIDE}</width><height>{SIDE}</height>"
            f"</size>{objects}</annotation>")
    round_trip(world, source, voc, kind="boxes", classes="cat,dog", prefill="voc", layout="voc")


def test_label_studio_boxes_prefill_a_task_and_download_as_label_studio(world: World) -> None:
    source = world.folder / "studio"
    paths = [f"img/{index}.png" for index in range(6)]
    draw(source, paths)

    def rectangle(label: str, x: float, y: float, width: float, height: float) -> dict:
        return {"type": "rectanglelabels", "original_width": SIDE, "original_height": SIDE,
                "value": {"x": x, "y": y, "width": width, "height": height, "rotation": 0, "rectanglelabels": [label]}}

    results = [[rectangle("cat", 25, 12.5, 50, 25)], [rectangle("dog", 0, 0, 100, 100), rectangle("cat", 50, 50, 10, 10)],
               [], [rectangle("dog", 12.5, 25, 12.5, 25)], [rectangle("cat", 1, 2, 3, 4)]]
    document = [{"data": {"image": f"/data/local-files/?d=photos/{path}"},
                 "annotations": [{"completed_by": 1, "result": result}]} for path, result in zip(paths, results)]
    document.append({"data": {"image": paths[5]}, "annotations": []})  # not annotated: no pre-fill
    (source / "label-studio.json").write_text(json.dumps(document))
    imported = read_folder(label_studio, source)
    task = create(world, push(world, source), "boxes", "cat,dog", "label-studio:label-studio.json")
    assert task["prefilled"] == 5

    with world.http() as http:
        download = http.get(f"/labeling/tasks/{task['id']}/label-studio")
    assert download.status_code == 200 and download.headers["content-type"] == "application/json"
    assert download.headers["content-disposition"].startswith("attachment;")
    saved = world.folder / "downloaded.json"
    world.server.cli("label", "export", str(task["id"]), "--format", "label-studio", "--file", str(saved), check=True)
    assert json.loads(saved.read_bytes()) == download.json()
    back = label_studio.read(paths + [label_studio.OUTPUT],
                             lambda path: saved.read_bytes() if path == label_studio.OUTPUT else None)
    assert labels_of(back) == labels_of(imported)


def test_an_import_the_task_cannot_hold_is_refused_naming_prefill(world: World) -> None:
    source = world.folder / "broken"
    paths = [f"img/{index}.png" for index in range(3)]
    draw(source, paths)
    (source / "annotations.json").write_text("{not json")
    (source / "labels.csv").write_text("path,label\nimg/0.png,cat\nimg/1.png,bird\n")
    # A COCO file that states a larger image than the file is: its box lies outside the real one.
    (source / "big.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "img/0.png", "width": SIDE * 10, "height": SIDE * 10}],
        "categories": [{"id": 1, "name": "cat"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [SIDE * 2, 0, 5, 5], "iscrowd": 0}]}))
    dataset = push(world, source)
    base = {"project": world.project, "dataset": dataset, "classes": ["cat", "dog"],
            "annotators": [world.annotators[0]]}
    cases = [("classification", "coco", "annotations.json: is not JSON"),
             ("classification", "csv", "classes the task does not have: bird"),
             ("boxes", "csv", "labels of the whole image"),
             ("boxes", "coco:big.json", f"passes the edge of the image, which is {SIDE} × {SIDE} pixels")]
    with world.http() as http:
        for kind, layout, problem in cases:
            named, _, path = layout.partition(":")
            answer = http.post("/labeling/tasks", json={**base, "name": unique("refused"), "kind": kind,
                                                        "prefill": {"format": named, "path": path or None}})
            assert answer.status_code == 422, answer.text
            detail = answer.json()["details"][0]
            assert detail["field"] == "prefill" and problem in answer.text, answer.text


def test_two_annotators_agreement_is_computed_and_recorded_by_the_export(world: World) -> None:
    source = world.folder / "agreement"
    paths = [f"img/{index}.png" for index in range(6)]
    draw(source, paths)
    task = create(world, push(world, source), "classification", "a,b", None, per_item=2)
    # They agree on 4 of 6 items; each says a three times: chance agreement 1/2, kappa (2/3 − 1/2) / (1 − 1/2).
    given = {0: "aaabbb", 1: "aabbba"}
    for who, labels in given.items():
        with world.http(who) as http:
            for label in labels:
                item = http.get(f"/labeling/tasks/{task['id']}/next").json()
                http.put(f"/labeling/tasks/{task['id']}/items/{item['id']}/annotation",
                         json={"labels": [label]}).raise_for_status()
    with world.http() as http:
        figures = http.get(f"/labeling/tasks/{task['id']}/agreement").json()
        made = http.post(f"/labeling/tasks/{task['id']}/export", json={"format": "csv"}).json()["version"]
    assert figures["items_compared"] == 6 and figures["kappa_kind"] == "cohen"
    assert figures["percent"] == pytest.approx(4 / 6) and figures["kappa"] == pytest.approx(1 / 3)
    assert figures["per_class"] == pytest.approx({"a": 2 / 3, "b": 2 / 3})
    assert figures["per_annotator"] == pytest.approx(dict.fromkeys(world.annotators, 4 / 6)), "the other's labels"
    assert made["statistics"]["labeling"]["agreement"] == figures
    shown = world.server.cli("label", "show", str(task["id"]), check=True).stdout
    assert "agreement: 66.7% over 6 items; kappa (cohen): 0.333" in shown, shown
