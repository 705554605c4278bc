"""The Volumes page in a real browser against a real server that measures volumes every second:
two volumes of a project, one filled to a tenth of its quota and mounted by a waiting job, one
filled past its quota; their rows, bars and the job's link, the project filter, and a user of
another project who sees neither. The bars' states without a server: `usage` alone."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from browsing import Visit, expect
from conftest import RunningServer, start_server, stop_server, wait_for

from mlyard.api.volumes import VolumeInfo
from mlyard.web.volumes import usage

PASSWORD = "volume pages pass 1"
MiB = 1024**2
HOLD = {"quota": {"gpu": 0, "cpu": 0, "memory": 0}, "borrow_limit": {"gpu": 0, "cpu": 0, "memory": 0}}
"""A queue whose jobs wait, so the job that mounts a volume stays unfinished."""
FAILURE_RED = "rgb(185, 28, 28)"
"""app.css's --failure, the fill of a bar over its quota."""


@dataclass
class Volumes:
    server: RunningServer
    project: str
    other: str
    maker: str
    tokens: dict[str, str]
    job: int
    """Waiting in a held queue, mounting `scratch`."""

    def as_(self, who: str) -> RunningServer:
        return replace(self.server, env={**self.server.env, "MLYARD_TOKEN": self.tokens[who]})


@pytest.fixture(scope="module")
def volume_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server for the module: the browser tests' shared one measures volumes only every 30 s."""
    running = start_server(tmp_path_factory.mktemp("mlyard-web-volumes"), MLYARD_VOLUME_SCAN_INTERVAL="1")
    yield running
    stop_server(running)


def create_volume(server: RunningServer, token: str, **fields: str) -> Path:
    """Makes a volume through the API; returns its directory, the one the server added."""
    root = server.home / "volumes"
    before = set(root.iterdir()) if root.is_dir() else set()
    answer = httpx.post(f"{server.url}/api/v1/volumes", json=fields, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 201, answer.text
    made = [path for path in root.iterdir() if path.is_dir()] if root.is_dir() else []
    added = set(made) - before
    assert len(added) == 1, f"expected one new directory under {root}, found {sorted(added)}"
    return added.pop()


def measured(server: RunningServer, token: str) -> bool:
    listing = httpx.get(f"{server.url}/api/v1/volumes", headers={"Authorization": f"Bearer {token}"}).json()
    by_name = {volume["name"]: volume for volume in listing}
    return by_name["scratch"]["used_bytes"] == 5 * MiB and by_name["full"]["over_quota"]


@pytest.fixture(scope="module")
def volumes(volume_server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Volumes:
    tag = uuid.uuid4().hex[:6]
    project, other, queue = f"vols-{tag}", f"other-{tag}", f"held-{tag}"
    users = {"maker": f"maker-{tag}", "outsider": f"outsider-{tag}"}
    with volume_server.client() as admin:
        admin.create_project(project)
        admin.create_project(other)
        admin.set_queue(queue, {**HOLD, "project": project})
        for who, where in (("maker", project), ("outsider", other)):
            admin.create_user(users[who], password=PASSWORD)
            admin.set_member(where, users[who], "member")
    with httpx.Client(base_url=f"{volume_server.url}/api/v1") as http:
        tokens = {who: http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]
                  for who, name in users.items()}
    scratch = create_volume(volume_server, tokens["maker"], name="scratch", project=project, size="50Mi",
                            description="Checkpoints of <b>nightly</b> runs")
    full = create_volume(volume_server, tokens["maker"], name="full", project=project, size="1Mi")
    create_volume(volume_server, tokens["outsider"], name="elsewhere", project=other, size="10Mi")
    (scratch / "checkpoint.bin").write_bytes(b"\0" * (5 * MiB))
    (full / "too-much.bin").write_bytes(b"\0" * (3 * MiB))

    spec = tmp_path_factory.mktemp("volume-job") / "mounts.yaml"
    spec.write_text(json.dumps({"name": "mounts-scratch", "project": project, "queue": queue, "command": ["true"],
                                "roles": [{"resources": {"memory": "64Mi"}}], "volumes": [{"name": "scratch"}]}))
    made = Volumes(server=volume_server, project=project, other=other, maker=users["maker"], tokens=tokens, job=0)
    submitted = made.as_("maker").cli_json("submit", str(spec), "--no-code")
    made.job = (submitted[0] if isinstance(submitted, list) else submitted)["id"]
    assert wait_for(lambda: measured(volume_server, tokens["maker"]), timeout=30, interval=0.5), \
        "the server did not measure the volumes"
    return made


@pytest.fixture
def tab(browser, volumes: Volumes, request: pytest.FixtureRequest) -> Iterator[Visit]:
    visit = Visit(browser, volumes.server, request.node.name)
    yield visit
    visit.context.close()
    assert not visit.csp_violations, f"the page broke its Content-Security-Policy: {visit.csp_violations}"


@pytest.mark.slow
@pytest.mark.browser
def test_the_volumes_page_shows_quotas_usage_and_mounting_jobs(tab: Visit, volumes: Volumes) -> None:
    tab.log_in(volumes.tokens["maker"])
    tab.page.get_by_role("navigation", name="Main").get_by_role("link", name="Volumes").click()
    expect(tab.page).to_have_url(re.compile(r"/volumes$"))
    expect(tab.page.locator("#volumes tbody tr")).to_have_count(2)
    tab.shot("volumes")

    scratch = tab.page.locator(f"tr[data-volume='{volumes.project}/scratch']")
    expect(scratch).to_have_attribute("data-state", "within")
    expect(scratch.locator(".description")).to_have_text("Checkpoints of <b>nightly</b> runs")
    expect(scratch.locator(".quota")).to_have_text("50.0 MiB")
    expect(scratch.locator(".used")).to_have_text("5.0 MiB")
    expect(scratch.locator(".usage-text")).to_have_text("5.0 MiB of 50.0 MiB (10%)")
    expect(scratch.locator(".qbar-used")).to_have_attribute("style", re.compile(r"width: 10%"))
    expect(scratch.locator(".over-quota")).to_have_count(0)
    expect(scratch.locator(".enforcement")).to_have_text("measured by mlyard")
    expect(scratch.locator(".created")).to_contain_text(volumes.maker)

    full = tab.page.locator(f"tr[data-volume='{volumes.project}/full']")
    expect(full).to_have_attribute("data-state", "over")
    expect(full.locator(".used")).to_have_text("3.0 MiB")
    expect(full.locator(".usage-text")).to_have_text("3.0 MiB of 1.0 MiB (300%)")
    expect(full.locator(".volume-bar")).to_have_attribute("aria-label", "full: 3.0 MiB of 1.0 MiB (300%), over quota")
    expect(full.locator(".over-quota")).to_be_visible()
    expect(full.locator(".qbar-used")).to_have_attribute("style", re.compile(r"width: 100%"))
    expect(full.locator(".qbar-used")).to_have_css("background-color", FAILURE_RED)
    expect(full.locator(".mounted-by")).to_have_text("none")

    scratch.get_by_role("link", name=f"job {volumes.job}").click()
    expect(tab.page).to_have_url(re.compile(rf"/jobs/{volumes.job}$"))


@pytest.mark.slow
@pytest.mark.browser
def test_a_user_outside_the_project_does_not_see_its_volumes(tab: Visit, volumes: Volumes) -> None:
    tab.log_in(volumes.tokens["outsider"])
    tab.page.goto("/volumes")
    expect(tab.page.locator("#volumes tbody tr")).to_have_count(1)
    expect(tab.page.locator(f"tr[data-volume='{volumes.other}/elsewhere']")).to_be_visible()
    expect(tab.page.locator(f"tr[data-volume^='{volumes.project}/']")).to_have_count(0)
    tab.shot("outsider")

    tab.page.goto(f"/volumes?project={volumes.project}")
    expect(tab.page.locator("#volumes .empty")).to_contain_text(
        f"mlyard volumes create NAME --size 50Gi --project {volumes.project}")
    tab.page.select_option("#volumes-project", volumes.other)
    tab.page.get_by_role("button", name="Show").click()
    expect(tab.page).to_have_url(re.compile(rf"/volumes\?project={volumes.other}$"))
    expect(tab.page.locator("#volumes tbody tr")).to_have_count(1)
    tab.shot("filtered")


def volume(**fields: object) -> VolumeInfo:
    return VolumeInfo.model_validate({"project": "p", "name": "v", "description": "", "size_bytes": 100 * MiB,
                                      "used_bytes": None, "measured_at": None, "over_quota": False,
                                      "enforcement": None, "created_by": "ann", "created_at": 0.0, **fields})


def bar(**fields: object) -> tuple[str, float, str]:
    drawn = usage(volume(**fields))
    return drawn.state, drawn.width_percent, drawn.summary


def test_the_bars_say_unmeasured_near_and_over() -> None:
    assert bar() == ("unmeasured", 0.0, "not measured yet, of 100.0 MiB")
    assert bar(used_bytes=0) == ("within", 0.0, "0 B of 100.0 MiB (0%)")
    assert bar(used_bytes=95 * MiB) == ("near", 95.0, "95.0 MiB of 100.0 MiB (95%)")
    # Past the quota but not flagged yet (the next measurement flags it): a full bar, not an over one.
    assert bar(used_bytes=120 * MiB) == ("near", 100.0, "120.0 MiB of 100.0 MiB (120%)")
    assert bar(used_bytes=120 * MiB, over_quota=True) == ("over", 100.0, "120.0 MiB of 100.0 MiB (120%)")
