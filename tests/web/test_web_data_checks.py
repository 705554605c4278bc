"""Cleaning reports on the Data pages in a real browser against a real server: a member clicks
Check on a version's page, sees the report listed as running until the job (`python -m
mlyard.cleaning`) has made it and the leader has stored it, opens it, sees the planted exact
duplicate's thumbnails side by side, its label conflict with each file's label and the
truncated PNG, then cleans them away and lands on the child version. A viewer of the project
sees the reports but no Check button nor Clean form, and what they post by hand is refused
with a page that says why."""

from __future__ import annotations

import random
import re
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from browsing import Visit, expect
from conftest import RunningServer
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PASSWORD = "cleaning pages pass 1"
REPORT_TIMEOUT_MS = 180_000
"""The job queues, starts a Python, decodes and hashes the images; the leader then stores the report."""
DUPLICATE, COPY, BROKEN = "train/0/same.png", "train/1/copy.png", "train/1/broken.png"
FILES = 7


@dataclass
class Checked:
    server: RunningServer
    project: str
    name: str
    tokens: dict[str, str]
    """owner: a member of the project; viewer: a viewer of it."""

    @property
    def url(self) -> str:
        return f"/data/{self.project}/{self.name}"


def noise(path: Path, seed: int) -> None:
    """An image of random pixels: no two seeds' perceptual hashes are near, so only the planted
    copy is a duplicate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = random.Random(seed).randbytes(48 * 48 * 3)
    Image.frombytes("RGB", (48, 48), pixels).save(path)


def planted(folder: Path) -> Path:
    """7 files in image folders (train|test / label / file): one file copied under another label
    (an exact duplicate and a label conflict) and one PNG cut short (corrupt)."""
    for seed, path in enumerate((DUPLICATE, "train/0/a.png", "train/1/b.png", "test/0/c.png", "test/1/d.png",
                                 BROKEN)):
        noise(folder / path, seed)
    (folder / COPY).write_bytes((folder / DUPLICATE).read_bytes())
    (folder / BROKEN).write_bytes((folder / BROKEN).read_bytes()[:60])
    return folder


@pytest.fixture(scope="module")
def checked(web_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Checked:
    tag = uuid.uuid4().hex[:6]
    project = f"checks-{tag}"
    users = {"owner": f"cleaner-{tag}", "viewer": f"looker-{tag}"}
    with web_server.client() as admin:
        admin.create_project(project)
        for who, role in (("owner", "member"), ("viewer", "viewer")):
            admin.create_user(users[who], password=PASSWORD)
            admin.set_member(project, users[who], role)
    with httpx.Client(base_url=f"{web_server.url}/api/v1") as http:
        tokens = {who: http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]
                  for who, name in users.items()}
    made = Checked(server=web_server, project=project, name=f"digits-{tag}", tokens=tokens)
    owner = replace(web_server, env={**web_server.env, "MLYARD_TOKEN": tokens["owner"]})
    owner.cli("datasets", "create", f"{project}/{made.name}", check=True)
    folder = planted(tmp_path_factory.mktemp("checks") / "digits")
    owner.cli("datasets", "push", f"{project}/{made.name}", str(folder), "-m", "with planted problems", check=True)
    return made


def refused_page(answer, status: int, says: str) -> None:
    assert answer.status == status, answer.text()
    assert says in answer.text() and "Traceback" not in answer.text(), answer.text()


def csrf_of(tab: Visit) -> str:
    return tab.page.locator("input[name='csrf']").first.input_value()


def start_and_wait(tab: Visit, checked: Checked):
    """Clicks Check on v1's page; answers the report's row once the job has made it."""
    tab.page.goto(checked.url)
    section = tab.page.locator("#checks[data-loaded]")
    expect(section.locator(".empty")).to_contain_text("No reports of v1")
    tab.page.get_by_role("button", name="Check", exact=True).click()
    expect(tab.page).to_have_url(re.compile(r"\?version=v1#checks$"))
    row = tab.page.locator("#checks tr[data-check]")
    expect(row).to_have_count(1)
    expect(row.locator(".status")).to_have_text("running")
    expect(row.get_by_role("link", name=re.compile(r"^job \d+$"))).to_be_visible()
    tab.shot("running")
    # The section polls itself while the report is running: no reload here.
    expect(row).not_to_have_attribute("data-state", "running", timeout=REPORT_TIMEOUT_MS)
    assert row.get_attribute("data-state") == "done", row.inner_text()
    expect(row.locator(".status")).to_have_text("done")
    expect(row.locator(".check-count[data-kind='exact_duplicates']")).to_have_text("exact duplicates 1")
    expect(row.locator(".check-count[data-kind='corrupt']")).to_have_text("corrupt 1")
    tab.shot("done")
    return row


def assert_side_by_side(tiles) -> None:
    expect(tiles).to_have_count(2)
    boxes = []
    for index in range(2):
        image = tiles.nth(index).locator("img.thumb")
        image.scroll_into_view_if_needed()
        expect(image).to_have_js_property("complete", True)
        assert image.evaluate("(image) => image.naturalWidth") > 0
        boxes.append(image.bounding_box())
    assert abs(boxes[0]["y"] - boxes[1]["y"]) < 1, boxes
    assert boxes[1]["x"] >= boxes[0]["x"] + boxes[0]["width"], boxes


def test_a_report_is_made_drawn_and_cleaned_from_the_pages(visit: Visit, checked: Checked, browser) -> None:
    visit.log_in(checked.tokens["owner"])
    row = start_and_wait(visit, checked)
    row.get_by_role("link", name=re.compile(r"^report \d+$")).click()
    expect(visit.page).to_have_url(re.compile(rf"{checked.url}/checks/\d+$"))
    report = visit.page.url
    expect(visit.page.locator("#check-state")).to_have_text("done")
    expect(visit.page.locator("#check-summary [data-kind='exact_duplicates'] dd")).to_have_text("1")
    state = visit.page.request.get(f"{report}/state")  # what a running report's page polls
    assert state.ok and state.headers.get("hx-refresh") == "true" and 'data-state="done"' in state.text()

    duplicates = visit.page.locator("#exact-duplicates .check-group")
    expect(duplicates).to_have_count(1)
    tiles = duplicates.locator("figure.tile")
    assert_side_by_side(tiles)
    expect(tiles.nth(0).locator(".tile-path")).to_have_text(DUPLICATE)
    expect(tiles.nth(0).locator(".tile-note")).to_have_text("stays")
    expect(tiles.nth(1).locator(".tile-path")).to_have_text(COPY)
    conflict = visit.page.locator("#label-conflicts .check-group")
    expect(conflict).to_have_count(1)
    assert_side_by_side(conflict.locator("figure.tile"))
    expect(conflict.locator(f"figure[data-path='{DUPLICATE}'] .tile-note")).to_have_text("label 0")
    expect(conflict.locator(f"figure[data-path='{COPY}'] .tile-note")).to_have_text("label 1")
    broken = visit.page.locator(f"#unreadable figure[data-path='{BROKEN}']")
    expect(broken).to_be_visible()
    expect(broken.locator("img")).to_have_count(0)  # no thumbnail of what cannot be decoded
    expect(visit.page.locator("#balance-chart .bars-row[data-label='1']")).to_have_attribute("data-count", "4")
    assert visit.page.locator("#balance-chart .bars-row[data-label='1'] .bar-fill").evaluate(
        "(bar) => bar.style.width") == "100%"
    expect(visit.page.locator("#clean .drop-kind[data-kind='duplicates']")).to_contain_text("1 file")
    visit.shot("report")

    refused_page(visit.page.request.post(f"{report}/clean", form={"csrf": csrf_of(visit)}), 422,
                 "tick at least one kind")
    visit.page.check("#drop-duplicates")
    visit.page.check("#drop-corrupt")
    visit.shot("ticked")
    visit.page.get_by_role("button", name="Clean", exact=True).click()
    expect(visit.page).to_have_url(re.compile(rf"{checked.url}\?version=v2$"))
    expect(visit.page.locator("#selected-version")).to_have_attribute("data-version", "v2")
    expect(visit.page.locator("#selected-version .facts dd").first).to_have_text(str(FILES - 2))
    expect(visit.page.locator("#versions tr[data-version='v2'] .parent")).to_have_text("v1")
    expect(visit.page.locator("#selected-version .message-line")).to_contain_text("dropped 2 files")
    expect(visit.page.locator("#checks[data-loaded] .empty")).to_contain_text("No reports of v2")
    visit.shot("cleaned")

    visit.page.goto(report)
    visit.page.check("#drop-wrong-extension")
    visit.page.get_by_role("button", name="Clean", exact=True).click()
    expect(visit.page.locator("#page-notice")).to_contain_text("Nothing to drop")
    # One file chosen in its group: the copy the kind would have kept.
    visit.page.locator(f"#exact-duplicates figure[data-path='{DUPLICATE}'] input[name='path']").check()
    visit.page.get_by_role("button", name="Clean", exact=True).click()
    expect(visit.page).to_have_url(re.compile(rf"{checked.url}\?version=v3$"))
    expect(visit.page.locator("#selected-version .message-line")).to_contain_text("(chosen files): dropped 1 file:")
    expect(visit.page.locator("#selected-version .facts dd").first).to_have_text(str(FILES - 1))

    viewer = Visit(browser, checked.server, f"{visit.folder.name}-viewer")
    try:
        viewer.log_in(checked.tokens["viewer"])
        viewer.page.goto(report)
        expect(viewer.page.locator("#exact-duplicates figure.tile")).to_have_count(2)
        expect(viewer.page.locator("#clean")).to_have_count(0)
        expect(viewer.page.locator("input[name='path']")).to_have_count(0)
        viewer.shot("viewer-report")
        refused_page(viewer.page.request.post(f"{report}/clean", form={"csrf": csrf_of(viewer), "drop": "corrupt"}),
                     403, "may not add versions")
        assert not viewer.csp_violations, viewer.csp_violations
    finally:
        viewer.context.close()


def test_a_viewer_sees_no_check_button_and_a_forged_check_is_refused(visit: Visit, checked: Checked) -> None:
    visit.log_in(checked.tokens["viewer"])
    visit.page.goto(checked.url)
    section = visit.page.locator("#checks[data-loaded]")
    expect(section.locator("table.checks-table")).to_be_visible()
    expect(visit.page.get_by_role("button", name="Check", exact=True)).to_have_count(0)
    visit.shot("no-check")
    refused_page(visit.page.request.post(f"{checked.url}/v1/checks", form={"csrf": csrf_of(visit)}), 403,
                 "may not check dataset")
    refused_page(visit.page.request.post(f"{checked.url}/v1/checks", form={"csrf": "forged"}), 403,
                 "did not come from this site")
    refused_page(visit.page.request.get(f"{checked.url}/checks/{2**31 - 1}"), 404, "no cleaning report")
    assert visit.page.request.get(f"{checked.url}/checks/{2**40}").status == 422
