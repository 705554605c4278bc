"""Labeling in a real browser against a real server.

A member makes a classification task from the Labeling page over 20 of scikit-learn's digits
as PNGs, labels them with the keyboard alone (a number key per item; undo, and the arrows back
to an earlier item), closes the browser halfway and resumes where they stopped. The reviewer
rejects one item with a comment; the annotator sees it first, with the comment, and relabels
it; the reviewer accepts everything; the export makes an ImageFolder version on which the
digits example trains. On a box task the annotator draws 3 boxes with the mouse (Annotorious),
and the COCO export holds them as COCO lays boxes out. A viewer of the project, and a member of
another, see no task and cannot save labels."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from browsing import Visit, expect
from conftest import RunningServer
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PASSWORD = "labeling pages pass 1"
ITEMS = 20
CLASSES = "1, 2, 3, 4, 5, 6, 7, 8, 9, 0"
"""In shortcut order: key N labels digit N, key 0 the tenth class, digit 0."""
BOXES = [(20, 20, 80, 70, "circle"), (100, 30, 170, 90, "square"), (40, 90, 120, 140, "circle")]
"""(left, top, right, bottom, class) in image pixels, drawn in that order on a 200×150 image."""


@dataclass
class Labeling:
    server: RunningServer
    project: str
    digits: str
    shapes: str
    users: dict[str, str]
    tokens: dict[str, str]
    truth: dict[str, str]
    """Each digit image's path in the version → its true digit."""

    def as_user(self, who: str) -> RunningServer:
        return replace(self.server, env={**self.server.env, "MLYARD_TOKEN": self.tokens[who]})


def digit_images(folder: Path) -> dict[str, str]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    truth = {}
    for index in range(ITEMS):
        path = f"{'test' if index % 5 == 4 else 'train'}/img-{index:02d}.png"
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray((digits.images[index] * 255 / 16).astype("uint8"), mode="L").save(folder / path)
        truth[path] = str(digits.target[index])
    return truth


@pytest.fixture(scope="module")
def labeling(web_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Labeling:
    tag = uuid.uuid4().hex[:6]
    project, other = f"label-{tag}", f"elsewhere-{tag}"
    users = {who: f"{who}-{tag}" for who in ("annotator", "reviewer", "viewer", "outsider")}
    with web_server.client() as admin:
        admin.create_project(project)
        admin.create_project(other)
        for who, role in (("annotator", "member"), ("reviewer", "member"), ("viewer", "viewer")):
            admin.create_user(users[who], password=PASSWORD)
            admin.set_member(project, users[who], role)
        admin.create_user(users["outsider"], password=PASSWORD)
        admin.set_member(other, users["outsider"], "member")
    with httpx.Client(base_url=f"{web_server.url}/api/v1") as http:
        tokens = {who: http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]
                  for who, name in users.items()}
    made = Labeling(web_server, project, f"digits-{tag}", f"shapes-{tag}", users, tokens, {})
    owner = made.as_user("annotator")
    folder = tmp_path_factory.mktemp("labeling")
    made.truth.update(digit_images(folder / "digits"))
    (folder / "shapes").mkdir()
    Image.new("RGB", (200, 150), (235, 235, 235)).save(folder / "shapes" / "scene.png")
    # A phone photo: wider than the page's 1024-pixel view, stored sideways with an EXIF rotation.
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (1600, 800), (200, 220, 240)).save(folder / "shapes" / "z-photo.jpg", exif=exif)
    (folder / "notes").mkdir()
    (folder / "notes" / "a-review.txt").write_text("The film was <b>wonderful</b>.\n")
    (folder / "notes" / "more.jsonl").write_text('{"text": "dull and long", "id": 1}\n\n{"text": "a joy", "id": 2}\n')
    for name, source in ((made.digits, "digits"), (made.shapes, "shapes"), (f"notes-{tag}", "notes")):
        owner.cli("datasets", "create", f"{project}/{name}", check=True)
        owner.cli("datasets", "push", f"{project}/{name}", str(folder / source), "-m", "unlabeled", check=True)
    return made


def key_of(digit: str) -> str:
    return digit  # classes are in shortcut order: see CLASSES


def wait_for_item(tab: Visit) -> tuple[str, str]:
    """(item id, path) of the item shown, once its image has loaded."""
    labeler = tab.page.locator("#labeler")
    expect(labeler).to_have_attribute("data-ready", re.compile(r"^\d+$"))
    item = labeler.get_attribute("data-ready")
    expect(labeler).to_have_attribute("data-item", item)
    return item, tab.page.locator("#item-path").inner_text()


def label_shown(tab: Visit, labeling: Labeling) -> str:
    """Presses the shown item's digit and waits for the next item; answers the path labeled."""
    item, path = wait_for_item(tab)
    tab.page.keyboard.press(key_of(labeling.truth[path]))
    expect(tab.page.locator("#labeler")).not_to_have_attribute("data-item", item)
    return path


def log_in(tab: Visit, labeling: Labeling, who: str) -> None:
    tab.log_in_with_password(labeling.users[who], PASSWORD)
    expect(tab.page).to_have_url(re.compile(r"/jobs$"))


@contextmanager
def tab_of(browser, labeling: Labeling, who: str, name: str) -> Iterator[Visit]:
    """A new browser (its own cookies) logged in as `who`, closed after; it must keep to the CSP."""
    tab = Visit(browser, labeling.server, name)
    try:
        log_in(tab, labeling, who)
        yield tab
        assert not tab.csp_violations, tab.csp_violations
    finally:
        tab.context.close()


def create_from_the_page(tab: Visit, labeling: Labeling) -> str:
    tab.page.goto("/labeling")
    expect(tab.page.locator("#labeling-tasks .empty")).to_be_visible()
    form = tab.page.locator("#new-task")
    form.locator("#task-project").select_option(labeling.project)
    form.locator("#task-name").fill("digits-round-1")
    form.locator("#task-dataset").fill(labeling.digits)
    form.locator("#task-kind").select_option("classification")
    form.locator("#task-classes").fill(CLASSES)
    form.locator("#task-annotators").fill(labeling.users["annotator"])
    form.locator("#task-reviewers").fill(labeling.users["reviewer"])
    tab.shot("new-task")
    form.get_by_role("button", name="Create task").click()
    expect(tab.page).to_have_url(re.compile(r"/labeling/\d+$"))
    expect(tab.page.locator("#task-progress")).to_contain_text(f"0 of {ITEMS} items done")
    return tab.page.url.rsplit("/", 1)[1]


def test_classification_by_keyboard_with_resume_review_export_and_training(browser, labeling: Labeling, visit: Visit,
                                                                          tmp_path: Path) -> None:
    log_in(visit, labeling, "annotator")
    task = create_from_the_page(visit, labeling)
    visit.page.get_by_role("link", name="Label", exact=True).click()
    expect(visit.page).to_have_url(re.compile(rf"/labeling/{task}/annotate$"))
    first = label_shown(visit, labeling)
    # A wrong key, undone: the item comes back and takes the right label.
    item, wrong = wait_for_item(visit)
    visit.page.keyboard.press(key_of(str((int(labeling.truth[wrong]) + 1) % 10)))
    expect(visit.page.locator("#labeler")).not_to_have_attribute("data-item", item)
    visit.page.keyboard.press("z")
    expect(visit.page.locator("#labeler")).to_have_attribute("data-item", item)
    expect(visit.page.locator("#labeler-status")).to_have_text("Undone")
    label_shown(visit, labeling)
    for _ in range(8):
        label_shown(visit, labeling)
    # Back to the first item with the arrow: it shows its saved label.
    wait_for_item(visit)
    labeler = visit.page.locator("#labeler")
    position = int(labeler.get_attribute("data-position"))
    assert position == 10
    while position > 0:
        visit.page.keyboard.press("ArrowLeft")
        position -= 1
        expect(labeler).to_have_attribute("data-position", str(position))
        wait_for_item(visit)
    expect(visit.page.locator("#item-path")).to_have_text(first)
    expect(visit.page.locator(f"#classes button[data-class='{labeling.truth[first]}']")).to_have_attribute(
        "aria-pressed", "true")
    expect(visit.page.locator("#item-state")).to_have_text("submitted")
    visit.shot("ten-labeled")
    expect(visit.page.locator("#labeler")).not_to_have_attribute("data-preloaded", "")
    visit.context.close()  # the browser closes mid-task

    with tab_of(browser, labeling, "annotator", f"{visit.folder.name}-resumed") as resumed:
        resumed.page.goto(f"/labeling/{task}/annotate")
        wait_for_item(resumed)
        expect(resumed.page.locator("#progress-text")).to_contain_text(f"10 of {ITEMS} labeled by you")
        expect(resumed.page.locator("#item-position")).to_have_text("item 11")
        for _ in range(10):
            label_shown(resumed, labeling)
        expect(resumed.page.locator("#labeler-done")).to_be_visible()
        expect(resumed.page.locator("#progress-text")).to_contain_text(f"{ITEMS} of {ITEMS} labeled by you")
        resumed.shot("all-labeled")

    with tab_of(browser, labeling, "reviewer", f"{visit.folder.name}-reviewer") as reviewer:
        reviewer.page.goto(f"/labeling/{task}/review")
        rows = reviewer.page.locator("#review-items .review-item")
        expect(rows).to_have_count(ITEMS)
        rejected = rows.first.get_attribute("data-path")
        rows.first.locator("input[name='comment']").fill("look again at the loop")
        rows.first.get_by_role("button", name="Reject").click()
        expect(reviewer.page.locator(f".review-item[data-path='{rejected}'] .review-annotation")).to_have_count(0)
        reviewer.shot("rejected-one")

    with tab_of(browser, labeling, "annotator", f"{visit.folder.name}-relabel") as again:
        again.page.goto(f"/labeling/{task}/annotate")
        _, path = wait_for_item(again)
        assert path == rejected
        expect(again.page.locator("#item-rejection")).to_contain_text("look again at the loop")
        again.shot("rejected-shown")
        label_shown(again, labeling)
        expect(again.page.locator("#labeler-done")).to_be_visible()

    accept_all_and_export(browser, labeling, task, visit.folder.name, tmp_path)
    train_on_the_export(labeling)


def accept_all_and_export(browser, labeling: Labeling, task: str, name: str, folder: Path) -> None:
    with tab_of(browser, labeling, "reviewer", f"{name}-accept") as reviewer:
        reviewer.page.goto(f"/labeling/{task}/review")
        waiting = reviewer.page.locator("#review-items .review-item")
        expect(waiting).to_have_count(ITEMS)
        waiting.first.get_by_role("button", name="Accept").click()
        expect(waiting).to_have_count(ITEMS - 1)
        reviewer.page.get_by_role("button", name=f"Accept all {ITEMS - 1} shown").click()
        expect(reviewer.page.locator("#review-items .empty")).to_be_visible()
        reviewer.page.goto(f"/labeling/{task}")
        expect(reviewer.page.locator("#task-progress")).to_contain_text(f"{ITEMS} of {ITEMS} items done")
        expect(reviewer.page.locator("#agreement")).to_contain_text("ask for several annotators")
        reviewer.shot("task-page")
        reviewer.page.locator("#export-format").select_option("imagefolder")
        reviewer.page.get_by_role("button", name="Export").click()
        expect(reviewer.page).to_have_url(re.compile(rf"/data/{labeling.project}/{labeling.digits}\?version=v2$"))
        reviewer.shot("exported")
    pulled = folder / "exported"
    labeling.as_user("annotator").cli("datasets", "pull", f"{labeling.project}/{labeling.digits}:v2", str(pulled),
                                      check=True)
    files = {path.relative_to(pulled).as_posix() for path in pulled.rglob("*.png")}
    expected = {f"{path.split('/')[0]}/{digit}/{path.split('/')[1]}" for path, digit in labeling.truth.items()}
    assert expected <= files, sorted(files)


def train_on_the_export(labeling: Labeling) -> None:
    """The digits example, one replica, reading the exported image folder."""
    command = ["python", "examples/digits_ddp.py", "--data", "data/digits", "--epochs", "3"]
    datasets = [{"name": labeling.digits, "project": labeling.project, "version": "v2", "path": "data/digits"}]
    result = labeling.server.cli(
        "submit", "examples/digits-ddp.yaml", "--follow",
        "--set", f"command={json.dumps(command)}", "--set", f"datasets={json.dumps(datasets)}",
        "--set", "roles=" + json.dumps([{"name": "worker", "replicas": 1, "resources": {"cpu": 1, "memory": "2Gi"}}]),
        timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "data data/digits: 16 training and 4 test images" in result.stdout, result.stdout
    assert re.search(r"final test_accuracy=\d\.\d{4}", result.stdout), result.stdout


def drag(tab: Visit, image, left: float, top: float, right: float, bottom: float, width: int = 200) -> None:
    """Draws from (left, top) to (right, bottom), in the pixels of an image `width` wide as stored."""
    box = image.bounding_box()
    scale = box["width"] / width
    tab.page.mouse.move(box["x"] + left * scale, box["y"] + top * scale)
    tab.page.mouse.down()
    tab.page.mouse.move(box["x"] + (left + right) / 2 * scale, box["y"] + (top + bottom) / 2 * scale, steps=4)
    tab.page.mouse.move(box["x"] + right * scale, box["y"] + bottom * scale, steps=4)
    tab.page.mouse.up()


def test_three_boxes_drawn_with_the_mouse_export_as_coco(labeling: Labeling, visit: Visit, tmp_path: Path) -> None:
    annotator = labeling.as_user("annotator")
    made = annotator.cli_json("label", "create", "boxes-round-1", "--dataset", f"{labeling.project}/{labeling.shapes}",
                              "--kind", "boxes", "--classes", "circle,square",
                              "--annotators", labeling.users["annotator"])
    log_in(visit, labeling, "annotator")
    visit.page.goto(f"/labeling/{made['id']}/annotate")
    wait_for_item(visit)
    image = visit.page.locator("#item-image")
    expect(visit.page.locator("#stage svg")).to_have_count(1)  # Annotorious' layer over the image
    for number, (left, top, right, bottom, label) in enumerate(BOXES, start=1):
        visit.page.keyboard.press("1" if label == "circle" else "2")
        drag(visit, image, left, top, right, bottom)
        expect(visit.page.locator("#box-list li")).to_have_count(number)
        expect(visit.page.locator("#labeler-status")).to_have_text("Saved (draft)")
        visit.page.keyboard.press("Escape")
    expect(visit.page.locator("#box-list li")).to_have_text(["circle", "square", "circle"])
    visit.shot("three-boxes")
    label_shown_by(visit, "Enter")
    # The photo is shown as stored (not turned upright) and its box kept in its own pixels.
    _, path = wait_for_item(visit)
    assert path == "z-photo.jpg"
    photo = visit.page.locator("#item-image")
    assert photo.evaluate("(image) => [image.naturalWidth, image.naturalHeight]") == [1024, 512]
    drag(visit, photo, 800, 400, 1560, 780, width=1600)
    expect(visit.page.locator("#labeler-status")).to_have_text("Saved (draft)")
    visit.page.keyboard.press("Enter")
    expect(visit.page.locator("#labeler-done")).to_be_visible()

    visit.page.goto(f"/labeling/{made['id']}")
    with visit.page.expect_download() as downloading:
        visit.page.locator("#label-studio-download").click()
    studio = json.loads(Path(downloading.value.path()).read_text())
    results = [result for task in studio for annotation in task["annotations"] for result in annotation["result"]]
    assert sorted(result["value"]["rectanglelabels"][0] for result in results) == ["circle", "circle", "circle",
                                                                                   "square"]
    visit.page.locator("#export-format").select_option("coco")
    visit.page.get_by_role("button", name="Export").click()
    expect(visit.page).to_have_url(re.compile(r"\?version=v2$"))
    target = tmp_path / "pulled"
    annotator.cli("datasets", "pull", f"{labeling.project}/{labeling.shapes}:v2", str(target), check=True)
    coco = json.loads(next(target.rglob("*.json")).read_text())
    assert_coco_layout(coco)
    categories = {category["id"]: category["name"] for category in coco["categories"]}
    images = {image["id"]: image for image in coco["images"]}
    on_photo = [entry for entry in coco["annotations"] if images[entry["image_id"]]["file_name"].endswith("z-photo.jpg")]
    assert [images[entry["image_id"]]["width"] for entry in on_photo] == [1600]
    assert all(abs(a - b) <= 6 for a, b in zip(on_photo[0]["bbox"], (800, 400, 760, 380), strict=True)), on_photo
    drawn = sorted((categories[entry["category_id"]], *entry["bbox"]) for entry in coco["annotations"]
                   if entry not in on_photo)
    wanted = sorted((label, left, top, right - left, bottom - top) for left, top, right, bottom, label in BOXES)
    assert len(drawn) == 3
    for got, expected in zip(drawn, wanted, strict=True):
        assert got[0] == expected[0]
        assert all(abs(a - b) <= 2.5 for a, b in zip(got[1:], expected[1:], strict=True)), (got, expected)


def assert_coco_layout(coco: dict) -> None:
    """What COCO's own loader (pycocotools) needs: images with unique ids and their sizes,
    categories with unique ids, annotations naming both, bbox as [x, y, width, height] inside the
    image, area and iscrowd."""
    images = {image["id"]: image for image in coco["images"]}
    assert len(images) == len(coco["images"]) and all(isinstance(key, int) for key in images)
    categories = {category["id"] for category in coco["categories"]}
    assert len(categories) == len(coco["categories"])
    ids = [entry["id"] for entry in coco["annotations"]]
    assert len(set(ids)) == len(ids)
    for entry in coco["annotations"]:
        image = images[entry["image_id"]]
        assert entry["category_id"] in categories
        x, y, width, height = entry["bbox"]
        assert width > 0 and height > 0 and x >= 0 and y >= 0
        assert x + width <= image["width"] + 0.01 and y + height <= image["height"] + 0.01
        assert entry["iscrowd"] == 0 and abs(entry["area"] - width * height) < 1


def test_the_task_page_shows_two_annotators_agreement(labeling: Labeling, visit: Visit) -> None:
    annotator = labeling.as_user("annotator")
    made = annotator.cli_json("label", "create", f"twice-{uuid.uuid4().hex[:4]}", "--dataset",
                              f"{labeling.project}/{labeling.digits}", "--kind", "classification", "--classes", "a,b",
                              "--annotators", f"{labeling.users['annotator']},{labeling.users['reviewer']}",
                              "--per-item", "2")
    given = {"reviewer": ["a", "b", "b", "b"], "annotator": ["a", "a", "b", "b"]}  # 3 of 4 items agree
    for who, labels in given.items():
        with httpx.Client(base_url=f"{labeling.server.url}/api/v1",
                          headers={"Authorization": f"Bearer {labeling.tokens[who]}"}) as http:
            listed = http.get(f"/labeling/tasks/{made['id']}/items", params={"limit": 4}).json()["items"]
            for item, label in zip(listed, labels, strict=True):
                saved = http.put(f"/labeling/tasks/{made['id']}/items/{item['id']}/annotation", json={"labels": [label]})
                assert saved.status_code == 200, saved.text
    log_in(visit, labeling, "annotator")
    visit.page.goto(f"/labeling/{made['id']}")
    expect(visit.page.locator("#agreement .compared")).to_have_text("4")
    expect(visit.page.locator("#agreement .percent")).to_have_text("75.0%")
    expect(visit.page.locator("#agreement .kappa")).to_have_text("0.500")  # Cohen's: (0.75 - 0.5) / (1 - 0.5)
    expect(visit.page.locator("#agreement-annotators tbody tr")).to_have_count(2)
    visit.shot("agreement")
    # The maker of the task sees everyone's labels on its pages, but labels with their own only.
    visit.page.goto(f"/labeling/{made['id']}/annotate")
    wait_for_item(visit)
    labeler = visit.page.locator("#labeler")
    expect(labeler).to_have_attribute("data-position", "4")
    for position in (3, 2, 1):
        visit.page.keyboard.press("ArrowLeft")
        expect(labeler).to_have_attribute("data-position", str(position))
        wait_for_item(visit)
    expect(visit.page.locator("#classes button[data-class='a']")).to_have_attribute("aria-pressed", "true")
    expect(visit.page.locator("#classes button[data-class='b']")).to_have_attribute("aria-pressed", "false")


def test_text_items_are_shown_as_text_and_labeled_by_key(labeling: Labeling, visit: Visit) -> None:
    notes = f"notes-{labeling.digits.split('-', 1)[1]}"
    made = labeling.as_user("annotator").cli_json(
        "label", "create", "sentiment", "--dataset", f"{labeling.project}/{notes}", "--kind", "text",
        "--classes", "positive,negative", "--annotators", labeling.users["annotator"])
    log_in(visit, labeling, "annotator")
    visit.page.goto(f"/labeling/{made['id']}/annotate")
    shown = []
    for key in ("1", "2", "1"):
        wait_for_item(visit)
        shown.append(visit.page.locator("#item-text").inner_text())
        label_shown_by(visit, key)
    expect(visit.page.locator("#labeler-done")).to_be_visible()
    assert shown == ["The film was <b>wonderful</b>.\n", "dull and long", "a joy"], shown


def label_shown_by(tab: Visit, key: str) -> None:
    item = tab.page.locator("#labeler").get_attribute("data-item")
    tab.page.keyboard.press(key)
    expect(tab.page.locator("#labeler")).not_to_have_attribute("data-item", item)


def test_a_viewer_and_another_projects_member_see_no_task_and_cannot_label(browser, labeling: Labeling) -> None:
    annotator = labeling.as_user("annotator")
    made = annotator.cli_json("label", "create", f"access-{uuid.uuid4().hex[:4]}",
                              "--dataset", f"{labeling.project}/{labeling.digits}", "--kind", "classification",
                              "--classes", "a,b", "--annotators", labeling.users["annotator"])
    for who in ("viewer", "outsider"):
        with tab_of(browser, labeling, who, f"labeling-access-{who}") as tab:
            tab.page.goto("/labeling")
            expect(tab.page.locator(f"#labeling-tasks tr[data-task='{made['id']}']")).to_have_count(0)
            assert tab.page.goto(f"/labeling/{made['id']}").status == 404
            assert tab.page.goto(f"/labeling/{made['id']}/annotate").status == 404
            csrf = tab.page.locator("input[name='csrf']").first.input_value()
            answer = tab.page.request.put(f"/labeling/{made['id']}/items/1/annotation.json",
                                          data=json.dumps({"labels": ["a"]}),
                                          headers={"Content-Type": "application/json", "X-CSRF-Token": csrf})
            assert answer.status == 404 and "does not exist" in answer.json()["error"], answer.text()
