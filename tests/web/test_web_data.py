"""The Data pages in a real browser against a real server: the catalog and its search, a
dataset's card (Markdown rendered, a script in it shown as text), its version graph and folder
chart, the file browser with thumbnails and nested folders, and an access request asked for
from the catalog, granted by the owner on the page, after which the asker browses the files.
Over plain HTTP: the thumbnail route refuses a decompression bomb from its header and answers
404 to whoever may not read the dataset."""

from __future__ import annotations

import re
import struct
import uuid
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from browsing import Visit, expect
from conftest import RunningServer
from PIL import Image
from web_login import web_session

from mlyard.web import data_thumbnails

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PASSWORD = "data pages pass 1"
HOSTILE = '"><img src=x onerror="window.pwned=1">.txt'
"""A file name is the user's: the page shows it as text."""
DESCRIPTION = "# Street scenes\n\nPhotos of **streets** at night.\n\n<script>window.pwned = 1</script>\n"


@dataclass
class Data:
    server: RunningServer
    project: str
    other: str
    owner: str
    asker: str
    tokens: dict[str, str]
    photos: str
    """A catalog dataset of `project` with v1 and v2 of PNG files."""
    notes: str
    """A project-only dataset of `project`, tagged differently."""
    bombs: str
    """A dataset holding PNGs whose headers claim huge sizes."""

    def as_(self, who: str) -> RunningServer:
        return replace(self.server, env={**self.server.env, "MLYARD_TOKEN": self.tokens[who]})


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares `width`×`height` pixels and holds almost none: a decompression bomb's header."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def images(folder: Path, names: list[str]) -> Path:
    for index, name in enumerate(names):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40 + 10 * index, 30), (200, 30 * index % 255, 90)).save(path)
    return folder


@pytest.fixture(scope="module")
def data(web_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Data:
    tag = uuid.uuid4().hex[:6]
    project, other = f"data-{tag}", f"other-{tag}"
    users = {"owner": f"owner-{tag}", "asker": f"asker-{tag}"}
    with web_server.client() as admin:
        admin.create_project(project)
        admin.create_project(other)
        for who, where in (("owner", project), ("asker", other)):
            admin.create_user(users[who], password=PASSWORD)
            admin.set_member(where, users[who], "member")
    with httpx.Client(base_url=f"{web_server.url}/api/v1") as http:
        tokens = {who: http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]
                  for who, name in users.items()}
    made = Data(server=web_server, project=project, other=other, owner=users["owner"], asker=users["asker"],
                tokens=tokens, photos=f"photos-{tag}", notes=f"notes-{tag}", bombs=f"bombs-{tag}")
    owner = made.as_("owner")
    base = tmp_path_factory.mktemp("data-pages")
    owner.cli("datasets", "create", f"{project}/{made.photos}", "--description", DESCRIPTION, "--licence",
              "CC-BY-4.0", "--tag", "streets", "--tag", "night", "--catalog", check=True)
    folder = images(base / "photos", ["images/a.png", "images/b.png", "images/nested/c.png", "cover.png"])
    (folder / "labels").mkdir()
    (folder / "labels" / "a.txt").write_text("car\n")
    (folder / "labels" / HOSTILE).write_text("hostile\n")
    owner.cli("datasets", "push", f"{project}/{made.photos}", str(folder), "-m", "first", check=True)
    images(folder, ["images/d.png"])
    owner.cli("datasets", "push", f"{project}/{made.photos}", str(folder), "-m", "second", check=True)
    owner.cli("datasets", "create", f"{project}/{made.notes}", "--tag", "text", check=True)
    (base / "notes").mkdir()
    (base / "notes" / "readme.txt").write_text("notes\n")
    (base / "notes" / "labels.csv").write_text("path,label\na.txt,spam\nb.txt,spam\nc.txt,<b>ham</b>\n")
    owner.cli("datasets", "push", f"{project}/{made.notes}", str(base / "notes"), check=True)
    (base / "bombs").mkdir()
    (base / "bombs" / "huge.png").write_bytes(png_header(20_000, 20_000))
    (base / "bombs" / "large.png").write_bytes(png_header(8_000, 8_000))
    images(base / "bombs", ["small.png"])
    owner.cli("datasets", "push", f"{project}/{made.bombs}", str(base / "bombs"), check=True)
    return made


def owner_tab(browser, data: Data, name: str) -> Visit:
    tab = Visit(browser, data.server, name)
    tab.log_in(data.tokens["owner"])
    return tab


def test_the_catalog_lists_datasets_and_the_search_narrows_them(visit: Visit, data: Data) -> None:
    visit.log_in(data.tokens["owner"])
    visit.page.get_by_role("navigation", name="Main").get_by_role("link", name="Data").click()
    expect(visit.page).to_have_url(re.compile(r"/data$"))
    photos = visit.page.locator(f"tr[data-dataset='{data.project}/{data.photos}']")
    expect(photos).to_be_visible()
    expect(visit.page.locator(f"tr[data-dataset='{data.project}/{data.notes}']")).to_be_visible()
    expect(photos.locator("td").nth(2)).to_have_text(data.owner)
    expect(photos.locator("td").nth(4)).to_have_text("2")
    expect(photos.locator("td").nth(5)).to_have_text("v2")
    expect(photos.locator(".visibility")).to_have_text("catalog")
    expect(photos.locator(".access")).to_have_text("read")
    visit.shot("catalog")

    visit.page.fill("#data-search", data.photos)
    visit.page.get_by_role("button", name="Search").click()
    expect(photos).to_be_visible()
    expect(visit.page.locator("#datasets tbody tr")).to_have_count(1)
    visit.page.goto(f"/data?owner={data.owner}")
    expect(visit.page.locator("#datasets tbody tr")).to_have_count(3)
    photos.get_by_role("link", name="night").click()
    expect(visit.page).to_have_url(re.compile(r"/data\?tag=night$"))
    expect(visit.page.locator(f"tr[data-dataset='{data.project}/{data.notes}']")).to_have_count(0)
    expect(photos).to_be_visible()
    visit.shot("by-tag")


def test_the_dataset_page_shows_its_card_versions_and_folders(visit: Visit, data: Data) -> None:
    visit.log_in(data.tokens["owner"])
    visit.page.goto("/data")
    visit.page.get_by_role("link", name=data.photos, exact=True).click()
    card = visit.page.locator("#dataset-card")
    expect(card.locator(".markdown h1")).to_have_text("Street scenes")
    expect(card.locator(".markdown strong")).to_have_text("streets")
    expect(card.locator(".markdown")).to_contain_text("<script>window.pwned = 1</script>")
    assert visit.page.evaluate("() => window.pwned") is None
    expect(card.locator(".licence")).to_have_text("CC-BY-4.0")
    expect(card.locator(".tags")).to_contain_text("streets")
    expect(visit.page.locator("#versions tr[data-version='v2'] .parent a")).to_have_text("v1")
    expect(visit.page.locator(".version-edge[data-from='v1'][data-to='v2']")).to_have_count(1)
    expect(visit.page.locator("#aliases tr[data-alias='latest'] td").nth(1)).to_have_text("v2")
    expect(visit.page.locator("#selected-version")).to_have_attribute("data-version", "v2")
    chart = visit.page.locator("#folder-chart")
    expect(chart.locator(".bars-row[data-folder='images']")).to_have_attribute("data-files", "4")
    expect(chart.locator(".bars-row[data-folder='labels']")).to_have_attribute("data-files", "2")
    width = chart.locator(".bars-row[data-folder='images'] .bar-fill").evaluate("(bar) => bar.style.width")
    assert width == "100%"
    expect(visit.page.locator("#lineage")).to_contain_text("no job")
    visit.shot("dataset")

    visit.page.locator("#versions tr[data-version='v2'] .parent a").click()
    expect(visit.page.locator("#selected-version")).to_have_attribute("data-version", "v1")
    expect(visit.page.locator("#folder-chart .bars-row[data-folder='images']")).to_have_attribute("data-files", "3")


def test_the_dataset_page_draws_the_label_counts_of_a_labels_table(visit: Visit, data: Data) -> None:
    visit.log_in(data.tokens["owner"])
    visit.page.goto(f"/data/{data.project}/{data.notes}")
    chart = visit.page.locator("#label-chart")
    expect(chart.locator("figcaption")).to_have_text("Labels (table labels.csv)")
    expect(chart.locator(".bars-row[data-label='spam']")).to_have_attribute("data-count", "2")
    expect(chart.locator(".bars-row").nth(1).locator("dt")).to_have_text("<b>ham</b>")  # a label is text
    assert chart.locator(".bars-row[data-label='spam'] .bar-fill").evaluate("(bar) => bar.style.width") == "100%"


def test_the_file_browser_shows_thumbnails_and_nested_folders(visit: Visit, data: Data) -> None:
    visit.log_in(data.tokens["owner"])
    visit.page.goto(f"/data/{data.project}/{data.photos}")
    visit.page.get_by_role("link", name="Browse files").click()
    expect(visit.page).to_have_url(re.compile(r"/v2/files$"))
    rows = visit.page.locator("#files tbody tr")
    expect(rows).to_have_count(3)  # cover.png, images/, labels/
    expect(visit.page.locator("tr.folder[data-folder='images']")).to_be_visible()
    visit.page.get_by_role("link", name="images/").click()
    expect(visit.page.locator("tr.folder[data-folder='nested']")).to_be_visible()
    thumbs = visit.page.locator("img.thumb")
    expect(thumbs).to_have_count(3)  # a, b, d
    for index in range(3):
        thumbs.nth(index).scroll_into_view_if_needed()
        expect(thumbs.nth(index)).to_have_js_property("complete", True)
        assert thumbs.nth(index).evaluate("(image) => image.naturalWidth") > 0
    href = visit.page.locator("tr.file[data-path='images/a.png'] a").get_attribute("href")
    assert href.endswith("/download?path=images%2Fa.png")
    visit.shot("images")
    visit.page.get_by_role("link", name="nested/").click()
    expect(visit.page.locator("tr.file[data-path='images/nested/c.png']")).to_be_visible()
    with visit.page.expect_download() as downloaded:
        visit.page.get_by_role("link", name="c.png").click()
    assert downloaded.value.suggested_filename == "c.png"
    visit.shot("nested")
    visit.page.locator(".folder-path").get_by_role("link", name="v2").click()
    visit.page.get_by_role("link", name="labels/").click()
    expect(visit.page.locator("#files tr.file")).to_have_count(2)
    expect(visit.page.get_by_role("link", name=HOSTILE)).to_be_visible()
    expect(visit.page.locator("#files img")).to_have_count(0)
    assert visit.page.evaluate("() => window.pwned") is None


def test_an_access_request_is_asked_from_the_catalog_and_granted_on_the_page(visit: Visit, data: Data,
                                                                            browser) -> None:
    url = f"/data/{data.project}/{data.photos}"
    visit.log_in(data.tokens["asker"])
    visit.page.goto("/data")
    row = visit.page.locator(f"tr[data-dataset='{data.project}/{data.photos}']")
    expect(row.locator(".access")).to_have_text("card only")
    expect(visit.page.locator(f"tr[data-dataset='{data.project}/{data.notes}']")).to_have_count(0)
    row.get_by_role("link", name=data.photos).click()
    expect(visit.page.get_by_role("link", name="Browse files")).to_have_count(0)
    assert visit.page.request.get(f"{url}/v2/files").status == 403
    visit.page.get_by_role("button", name="Request access").click()
    expect(visit.page.locator("#page-notice")).to_contain_text("Access requested")
    expect(visit.page.locator("#request-access")).to_contain_text("pending")
    visit.shot("requested")

    owner = owner_tab(browser, data, visit.folder.name + "-owner")
    try:
        owner.page.goto(url)
        pending = owner.page.locator("#access-requests tbody tr[data-request]")
        expect(pending).to_have_count(1)
        expect(pending).to_contain_text(data.other)
        expect(pending).to_contain_text(data.asker)
        owner.shot("pending")
        pending.get_by_role("button", name="Grant").click()
        expect(owner.page.locator("#page-notice")).to_contain_text("Request granted")
        expect(owner.page.locator("#access-requests tbody tr[data-request]")).to_have_count(0)
        assert not owner.csp_violations, owner.csp_violations
    finally:
        owner.context.close()

    visit.page.goto(url)
    expect(visit.page.locator("#dataset-card .access")).to_have_text("you read its files")
    visit.page.get_by_role("link", name="Browse files").click()
    expect(visit.page.locator("tr.folder[data-folder='images']")).to_be_visible()
    visit.shot("granted")


def register(data: Data) -> str:
    """An administrator's `mlyard datasets register` of a folder under the server's data roots."""
    name = f"registered-{uuid.uuid4().hex[:6]}"
    folder = Path(data.server.env["MLYARD_DATA_ROOTS"]) / name
    (folder / "labels").mkdir(parents=True)
    (folder / "labels" / "a.txt").write_text("car\n")
    data.server.cli("datasets", "register", str(folder), "--name", name, check=True)
    return name


def viewer_token(data: Data) -> str:
    """A user who only views a project: nothing to claim for."""
    name = f"viewer-{uuid.uuid4().hex[:6]}"
    with data.server.client() as admin:
        admin.create_user(name, password=PASSWORD)
        admin.set_member(data.project, name, "viewer")
    with httpx.Client(base_url=f"{data.server.url}/api/v1") as http:
        return http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]


def claim_on_the_page(tab: Visit, url: str, project: str) -> str:
    """Claims the dataset with the page's form and answers the form's CSRF value."""
    tab.page.goto(url)
    expect(tab.page.locator("#dataset-card .owner")).to_have_text("unclaimed")
    form = tab.page.locator("#claim form")
    expect(form.locator("input[name='project']")).to_have_value(project)
    csrf = form.locator("input[name='csrf']").input_value()
    tab.page.fill("#claiming-message", f"for {project}")
    tab.page.get_by_role("button", name="Claim", exact=True).click()
    expect(tab.page.locator("#page-notice")).to_contain_text("Claim asked")
    expect(tab.page.locator("#claim")).to_contain_text(f"claimed it for project {project}")
    expect(tab.page.get_by_role("button", name="Claim", exact=True)).to_have_count(0)
    return csrf


def refused_page(answer, status: int, says: str) -> None:
    assert answer.status == status, answer.text()
    assert says in answer.text() and "Traceback" not in answer.text(), answer.text()


def test_registered_data_is_claimed_on_its_page_and_approved_there(visit: Visit, data: Data, browser) -> None:
    name = register(data)
    url = f"/data/default/{name}"
    visit.log_in(data.tokens["asker"])
    csrf = claim_on_the_page(visit, url, data.other)
    visit.shot("claimed")
    # Sent again (a reload, a double click): the pending claim stands as it was.
    again = visit.page.request.post(f"{url}/claims", form={"csrf": csrf, "project": data.other})
    assert again.ok, again.text()

    tabs = {who: Visit(browser, data.server, f"{visit.folder.name}-{who}") for who in ("owner", "viewer", "admin")}
    try:
        tabs["owner"].log_in(data.tokens["owner"])
        claim_on_the_page(tabs["owner"], url, data.project)

        viewer = tabs["viewer"]
        viewer.log_in(viewer_token(data))
        viewer.page.goto(url)
        expect(viewer.page.locator("#claim")).to_contain_text("only a member of a project may claim it")
        expect(viewer.page.get_by_role("button", name="Claim", exact=True)).to_have_count(0)
        forged = {"csrf": viewer.page.locator("input[name='csrf']").first.input_value(), "project": data.project}
        refused_page(viewer.page.request.post(f"{url}/claims", form=forged), 403, "may not claim datasets")
        viewer.shot("no-claim")

        admin = tabs["admin"]
        admin.log_in()
        admin.page.goto(url)
        pending = admin.page.locator("#pending-claims tbody tr[data-claim]")
        expect(pending).to_have_count(2)
        admin.shot("pending-claims")
        pending.filter(has_text=data.owner).get_by_role("button", name="Refuse").click()
        expect(admin.page.locator("#page-notice")).to_contain_text("Claim refused")
        expect(pending).to_have_count(1)
        pending.filter(has_text=data.asker).get_by_role("button", name="Approve").click()
        expect(admin.page).to_have_url(re.compile(rf"/data/{data.other}/{name}\?notice=claim-approved$"))
        expect(admin.page.locator("#page-notice")).to_contain_text("Claim approved")
        expect(admin.page.locator("#dataset-card .owner")).to_have_text(data.asker)
        expect(admin.page.locator("#claim")).to_have_count(0)
        admin.shot("approved")
        for tab in tabs.values():
            assert not tab.csp_violations, tab.csp_violations
    finally:
        for tab in tabs.values():
            tab.context.close()

    moved = f"/data/{data.other}/{name}"
    visit.page.goto(moved)
    expect(visit.page.locator("#dataset-card .project")).to_have_text(data.other)
    expect(visit.page.locator("#dataset-card .owner")).to_have_text(data.asker)
    expect(visit.page.locator("#dataset-card .access")).to_have_text("you read its files")
    expect(visit.page.locator("#claim")).to_have_count(0)
    visit.shot("owned")
    refused_page(visit.page.request.post(f"{moved}/claims", form={"csrf": csrf, "project": data.other}), 409,
                 "its owner may transfer it")


def test_the_thumbnail_route_refuses_bombs_and_hides_what_the_caller_may_not_read(data: Data) -> None:
    base = f"/data/{data.project}/{data.bombs}/v1/thumbnail"
    with httpx.Client(base_url=data.server.url, timeout=30) as owner:
        web_session(owner, data.tokens["owner"])
        made = owner.get(base, params={"path": "small.png"})
        assert made.status_code == 200
        assert made.headers["content-type"] == "image/png"
        assert made.headers["x-content-type-options"] == "nosniff"
        with Image.open(__import__("io").BytesIO(made.content)) as thumbnail:
            assert max(thumbnail.size) <= data_thumbnails.SIZES[0]
        for bomb in ("huge.png", "large.png"):
            refused = owner.get(base, params={"path": bomb})
            assert refused.status_code == 422, refused.text
            assert "no thumbnail" in refused.text
        assert owner.get(base, params={"path": "missing.png"}).status_code == 404
    with httpx.Client(base_url=data.server.url, timeout=30) as asker:
        web_session(asker, data.tokens["asker"])
        assert asker.get(base, params={"path": "small.png"}).status_code == 404
        assert asker.get(f"/data/{data.project}/{data.bombs}/v1/download", params={"path": "small.png"}
                         ).status_code == 404
        assert asker.get(f"/data/{data.project}/{data.bombs}").status_code == 404


def test_a_bomb_header_is_refused_before_decoding(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(20_000, 20_000))
    with pytest.raises(data_thumbnails.NoThumbnail):
        data_thumbnails.make_thumbnail(bomb, size=96)
    large = tmp_path / "large.png"
    large.write_bytes(png_header(8_000, 8_000))
    with pytest.raises(data_thumbnails.NoThumbnail, match="over 40,000,000 pixels"):
        data_thumbnails.make_thumbnail(large, size=96)
    cache = data_thumbnails.ThumbnailCache(limit=10)
    cache.put(("a", 96), b"12345678")
    cache.put(("b", 96), b"12345678")
    assert (cache.get(("a", 96)), cache.get(("b", 96)), len(cache)) == (None, b"12345678", 1)
