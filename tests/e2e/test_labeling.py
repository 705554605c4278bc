"""Labeling tasks through the real server: made on a dataset version with annotators and a
reviewer who are members of its project; each annotator gets the next item, saves drafts and
submissions, sees only their own labels and tasks; a reviewer rejects an item back with a
comment, which comes first in the annotator's queue, then accepts it, which makes it final; a
viewer cannot annotate and another project's member sees nothing."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer
from test_datasets import digits_folder, unique
from test_projects import PASSWORD, as_user, log_in, person

pytestmark = pytest.mark.slow


def api(server: RunningServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)


def token_of(server: RunningServer, name: str) -> str:
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        return http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]


def test_annotators_label_their_items_and_a_reviewer_sends_one_back(server: RunningServer, tmp_path: Path) -> None:
    suffix = unique("lab")[4:]
    project, other = f"lab-{suffix}", f"labo-{suffix}"
    server.cli("projects", "add", project, check=True)
    server.cli("projects", "add", other, check=True)
    roles = {"ann": "member", "bob": "member", "rev": "maintainer", "vic": "viewer"}
    people = {who: person(server, f"{who}-{suffix}", tmp_path, {project: role}) for who, role in roles.items()}
    people["out"] = person(server, f"out-{suffix}", tmp_path, {other: "member"})
    tokens = {who: token_of(server, f"{who}-{suffix}") for who in people}
    name = unique("to-label")
    server.cli_json("datasets", "push", f"{project}/{name}", str(digits_folder(tmp_path / "digits", count=8)))

    made = server.cli_json("label", "create", "digits-1", "--dataset", f"{project}/{name}:v1", "--kind",
                           "classification", "--classes", ",".join("0123456789"), "--annotators",
                           f"ann-{suffix},bob-{suffix}", "--reviewers", f"rev-{suffix}")
    task = made["id"]
    assert (made["items"], made["done"], made["version"]) == (8, 0, "v1"), made
    kept = server.cli("datasets", "rm", f"{project}/{name}:v1")
    assert kept.returncode == 1 and "labeling task digits-1 labels" in kept.stderr, kept.stderr
    viewer_task = server.cli("label", "create", "by-viewer", "--dataset", f"{project}/{name}", "--kind",
                             "classification", "--classes", "a,b", "--annotators", f"vic-{suffix}")
    assert viewer_task.returncode == 1 and "needs the member role" in viewer_task.stderr, viewer_task.stderr

    with api(server, tokens["ann"]) as ann, api(server, tokens["bob"]) as bob, api(server, tokens["rev"]) as rev:
        first = ann.get(f"/labeling/tasks/{task}/next").json()
        assert first["position"] == 0 and first["annotations"] == []
        draft = ann.put(f"/labeling/tasks/{task}/items/{first['id']}/annotation",
                        json={"labels": [], "status": "draft"})
        assert draft.status_code == 200 and draft.json()["status"] == "draft"
        assert ann.get(f"/labeling/tasks/{task}/next").json()["id"] == first["id"], "a draft is not done"
        unknown = ann.put(f"/labeling/tasks/{task}/items/{first['id']}/annotation", json={"labels": ["cat"]})
        assert unknown.status_code == 422 and unknown.json()["details"][0]["field"] == "labels"
        saved = ann.put(f"/labeling/tasks/{task}/items/{first['id']}/annotation", json={"labels": ["3"]})
        assert saved.status_code == 200 and saved.json()["status"] == "submitted"
        assert ann.get(f"/labeling/tasks/{task}/next").json()["position"] == 1
        assert bob.get(f"/labeling/tasks/{task}/next").json()["position"] == 1, "one annotator per item: item 0 is done"
        bobs_page = bob.get(f"/labeling/tasks/{task}/items").json()["items"]
        assert bobs_page[0]["annotations"] == [], "an annotator sees their own labels only"
        assert rev.get(f"/labeling/tasks/{task}/items").json()["items"][0]["annotations"][0]["labels"] == ["3"]

        rejected = rev.post(f"/labeling/tasks/{task}/items/{first['id']}/review",
                            json={"annotator": f"ann-{suffix}", "accept": False, "comment": "look again: a 5"})
        assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
        again = ann.get(f"/labeling/tasks/{task}/next").json()
        assert again["id"] == first["id"] and again["annotations"][0]["comment"] == "look again: a 5"
        ann.put(f"/labeling/tasks/{task}/items/{first['id']}/annotation", json={"labels": ["5"]}).raise_for_status()
        accepted = rev.post(f"/labeling/tasks/{task}/items/{first['id']}/review",
                            json={"annotator": f"ann-{suffix}", "accept": True})
        assert accepted.json()["status"] == "accepted" and accepted.json()["reviewed_by"] == f"rev-{suffix}"
        final = ann.put(f"/labeling/tasks/{task}/items/{first['id']}/annotation", json={"labels": ["6"]})
        assert final.status_code == 409
        assert bob.post(f"/labeling/tasks/{task}/items/{first['id']}/review",
                        json={"annotator": f"ann-{suffix}", "accept": True}).status_code == 403

    log_in(server, people["ann"], f"ann-{suffix}")
    shown = json.loads(as_user(server, people["ann"], "label", "show", str(task), "--output", "json").stdout)
    assert (shown["done"], shown["mine"]) == (1, 1)
    listed = json.loads(as_user(server, people["ann"], "label", "ls", "--output", "json").stdout)
    assert [item["id"] for item in listed] == [task]
    for outsider in ("vic", "out"):
        with api(server, tokens[outsider]) as http:
            assert http.get(f"/labeling/tasks/{task}").status_code == 404
            assert http.get("/labeling/tasks").json() == []
            assert http.put(f"/labeling/tasks/{task}/items/{first['id']}/annotation",
                            json={"labels": ["1"]}).status_code == 404


def test_a_labeled_task_exports_as_a_child_version_in_a_standard_layout(server: RunningServer,
                                                                       tmp_path: Path) -> None:
    suffix = unique("exp")[4:]
    project = f"exp-{suffix}"
    server.cli("projects", "add", project, check=True)
    person(server, f"ann-{suffix}", tmp_path, {project: "member"})
    token = token_of(server, f"ann-{suffix}")
    name = unique("to-export")
    server.cli_json("datasets", "push", f"{project}/{name}", str(digits_folder(tmp_path / "digits", count=6)))

    def label_all(task: int, body) -> int:
        done = 0
        with api(server, token) as http:
            while (answer := http.get(f"/labeling/tasks/{task}/next")).status_code == 200:
                item = answer.json()
                http.put(f"/labeling/tasks/{task}/items/{item['id']}/annotation", json=body(item)).raise_for_status()
                done += 1
        return done

    classes = server.cli_json("label", "create", "classes", "--dataset", f"{project}/{name}", "--kind",
                              "classification", "--classes", ",".join("0123456789"), "--annotators", f"ann-{suffix}")
    # The true class is the folder the digit came from: train/<label>/<n>.png.
    assert label_all(classes["id"], lambda item: {"labels": [item["path"].split("/")[1]]}) == 6
    with api(server, token) as http:
        folders = http.post(f"/labeling/tasks/{classes['id']}/export", json={"format": "imagefolder"})
        assert folders.status_code == 201, folders.text
        table = http.post(f"/labeling/tasks/{classes['id']}/export", json={"format": "csv"}).json()["version"]
        refused = http.post(f"/labeling/tasks/{classes['id']}/export", json={"format": "coco"})
    assert refused.status_code == 422 and refused.json()["details"][0]["field"] == "format"
    child = folders.json()["version"]
    assert child["parent"] == "v1" and child["statistics"]["labeling"]["annotators"] == [f"ann-{suffix}"]
    pulled = tmp_path / "pulled"
    server.cli("datasets", "pull", f"{project}/{name}:{child['version']}", str(pulled), check=True)
    images = sorted(path.relative_to(pulled).as_posix() for path in pulled.rglob("*.png"))
    assert len(images) == 6 and all(path.split("/")[-2].isdigit() for path in images), images
    assert child["statistics"]["labels"]["source"] == "image folders"
    assert table["statistics"]["labels"]["source"].startswith("table")

    boxes = server.cli_json("label", "create", "boxes", "--dataset", f"{project}/{name}:v1", "--kind", "boxes",
                            "--classes", "digit", "--annotators", f"ann-{suffix}")
    assert label_all(boxes["id"], lambda item: {"boxes": [{"label": "digit", "x": 1, "y": 2, "width": 4,
                                                            "height": 5}]}) == 6
    with api(server, token) as http:
        coco = http.post(f"/labeling/tasks/{boxes['id']}/export", json={"format": "coco"}).json()["version"]
    got = tmp_path / "coco"
    server.cli("datasets", "pull", f"{project}/{name}:{coco['version']}", str(got), check=True)
    [document] = [json.loads(path.read_text()) for path in got.rglob("*.json")]
    image_ids = {image["id"] for image in document["images"]}
    category_ids = {category["id"] for category in document["categories"]}
    assert len(document["annotations"]) == 6 and [category["name"] for category in document["categories"]] == ["digit"]
    for annotation in document["annotations"]:
        assert annotation["image_id"] in image_ids and annotation["category_id"] in category_ids
        assert annotation["bbox"] == [1, 2, 4, 5]
