"""Cleaning reports on the Data pages: a version's reports (a section the dataset's page loads,
which polls itself while a report is being made) with a Check button for members of the
dataset's project, a report's page with each kind of group drawn as thumbnails side by side,
and the form that cleans (a child version without the kinds ticked).

As in `web/data.py`, every read and action goes through the service (`services.datasets.checks`)
with the page's principal: a button left out only spares its user a refusal. A report is a
job's output, so its JSON is read as hostile: whatever is not of the expected shape is left
out, at most `MAX_GROUPS` groups of each kind and `MAX_TILES` files of a group are drawn, and
every path is text in the page and a query value in a thumbnail's URL."""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Path, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from mlyard.api.dataset_checks import DROP_KINDS, MAX_DISTANCE, CheckReport, CheckRequest, CleanRequest
from mlyard.api.datasets import VersionCreated
from mlyard.errors import Conflict, InvalidRequest, MlyardError, NotFound
from mlyard.server import auth
from mlyard.server.services.datasets import checks
from mlyard.web import data_thumbnails
from mlyard.web.data import Name, Project, Reference, dataset_url, label_bars
from mlyard.web.data_files import version_url
from mlyard.web.session import MAX_FORM_BYTES, ChangingPrincipal, PagePrincipal
from mlyard.web.templating import page

router = APIRouter(include_in_schema=False)

CheckId = Annotated[int, Path(ge=1, le=2**31 - 1)]
"""The column's range: PostgreSQL refuses to compare an INTEGER with a larger number."""
MAX_GROUPS = 50
"""Groups (or files, for the kinds of single files) drawn of each kind; the API has them all."""
MAX_TILES = 12
"""Files drawn of one group: a thousand copies of one image need not be a thousand thumbnails."""
POLL_SECONDS = 2
TONES = {"running": "running", "done": "success", "failed": "failure"}
DROPS = {
    "duplicates": "the copies in each group of exact duplicates (the first by path stays)",
    "near-duplicates": "the copies in each group of near duplicates (the first by path stays)",
    "corrupt": "files that cannot be decoded, and empty files",
    "wrong-extension": "files whose content is not what their extension says",
    "leaks": "the held-out side (test, val, …) of each leak",
    "conflicts": "every file of a label conflict",
    "label-issues": "the files flagged as likely mislabelled",
}
NOTICES = {"nothing-to-drop": "Nothing to drop: none of the version's files is of the kinds ticked."}


def report_url(project: str, name: str, check_id: int) -> str:
    return f"{dataset_url(project, name)}/checks/{check_id}"


def may_change(principal: auth.Principal, project: str) -> bool:
    """Whether the caller may start reports and clean (`checks.start_check` and `clean` decide)."""
    role = principal.role_in(project)
    return principal.job_id is None and role is not None and role >= auth.Role.MEMBER


def _error(request: Request, error: MlyardError, principal: auth.Principal) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal, nav="data")


def _fields(body: bytes) -> dict[str, list[str]]:
    return parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", errors="replace"))


# Before the report's page: `/data/P/N/checks/checks` is then the list of a version aliased
# `checks`, not a report numbered "checks".
@router.get("/data/{project}/{name}/{version}/checks")
def version_checks(request: Request, principal: PagePrincipal, project: Project, name: Name,
                   version: Reference) -> Response:
    """The version's reports: the section of the dataset's page, polled while one is running."""
    listed, error = [], None
    try:
        listed = checks.list_checks(request.app.state.database, principal, project, name, version)
    except MlyardError as refused:
        error = refused
    # htmx swaps in only a 2xx answer: the refusal is said inside the section instead.
    code = error.http_status if error is not None and not request.headers.get("hx-request") else 200
    return page(request, "data_checks_list.html", status_code=code, checks=listed, error=error, version=version,
                url=dataset_url(project, name), may_check=may_change(principal, project), tones=TONES,
                running=any(item.state == "running" for item in listed), poll_seconds=POLL_SECONDS,
                distance=CheckRequest().distance, max_distance=MAX_DISTANCE)


@router.post("/data/{project}/{name}/{version}/checks")
async def start_check(request: Request, principal: ChangingPrincipal, project: Project, name: Name,
                      version: Reference) -> Response:
    """Queues the job that makes a report of the version (`checks.start_check`)."""
    asked = (_fields(await request.body()).get("distance") or [""])[0].strip()
    try:
        made = CheckRequest(distance=int(asked)) if asked else CheckRequest()
    except ValueError:
        return _error(request, InvalidRequest(f"the distance is a whole number from 0 to {MAX_DISTANCE}",
                                              field="distance"), principal)
    try:
        started = await run_in_threadpool(checks.start_check, request.app.state.database, principal, project, name,
                                          version, made, wake=request.app.state.controller.wake,
                                          check_image=request.app.state.backend.check_image)
    except MlyardError as error:
        return _error(request, error, principal)
    return RedirectResponse(f"{dataset_url(project, name)}?version={quote(started.version, safe='')}#checks",
                            status_code=status.HTTP_303_SEE_OTHER)


@dataclass(frozen=True)
class Tile:
    """One file of a group: its thumbnail (`image`) or a blank, its path and what is said of it."""
    path: str
    note: str = ""
    image: bool = True


@dataclass(frozen=True)
class Group:
    tiles: list[Tile]
    more: int = 0
    """Files of the group not drawn."""
    note: str = ""
    leak: bool = False


@dataclass
class Section:
    key: str
    title: str
    about: str
    total: int = 0
    groups: list[Group] = field(default_factory=list)
    shown: int = 0

    @property
    def more(self) -> int:
        return max(0, self.total - self.shown)


def _dicts(report: dict, key: str) -> list[dict]:
    found = report.get(key)
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def _paths(value: object) -> list[str]:
    return [path for path in value if isinstance(path, str)] if isinstance(value, list) else []


def _image(path: str) -> bool:
    """As the thumbnail route decides: by the media type the path's extension gives."""
    return (mimetypes.guess_type(path)[0] or "").startswith("image/")


def _group(paths: list[str], *, notes: dict[str, str] | None = None, note: str = "", leak: bool = False,
           images: bool = True) -> Group:
    notes = notes or {}
    return Group(tiles=[Tile(path=path, note=notes.get(path, ""), image=images and _image(path))
                        for path in paths[:MAX_TILES]],
                 more=max(0, len(paths) - MAX_TILES), note=note, leak=leak)


def _grouped(section: Section, items: list[dict], make) -> Section:
    section.total = len(items)
    section.groups = [made for made in (make(item) for item in items[:MAX_GROUPS]) if made.tiles]
    section.shown = min(len(items), MAX_GROUPS)
    return section


def _flat(section: Section, tiles: list[Tile]) -> Section:
    """A kind of single files: one row of tiles."""
    section.total, section.shown = len(tiles), min(len(tiles), MAX_GROUPS)
    section.groups = [Group(tiles=tiles[:MAX_GROUPS])] if tiles else []
    return section


def _duplicates(item: dict, note: str) -> Group:
    paths = sorted(_paths(item.get("paths")))
    return _group(paths, notes={paths[0]: "stays"} if paths else None, note=note, leak=bool(item.get("leak")))


def _exact(item: dict) -> Group:
    return _duplicates(item, f"sha256 {str(item.get('sha256', ''))[:12]}")


def _near(item: dict) -> Group:
    splits = item.get("splits")
    said = ", ".join(str(split) for split in splits) if isinstance(splits, list) else ""
    return _duplicates(item, f"splits: {said}" if said else "")


def _leak(item: dict) -> Group:
    distance = item.get("distance")
    apart = f"{distance} bits apart" if isinstance(distance, int) and not isinstance(distance, bool) else ""
    return _group(_paths(item.get("paths")), note=apart)


def _conflict(item: dict) -> Group:
    labels = item.get("labels") if isinstance(item.get("labels"), dict) else {}
    return _group(_paths(item.get("paths")), notes={str(path): f"label {label}" for path, label in labels.items()})


def _label_issue(item: dict) -> Tile | None:
    path = item.get("path")
    if not isinstance(path, str):
        return None
    quality = item.get("quality")
    rated = f" (quality {quality:.2f})" if isinstance(quality, (int, float)) and not isinstance(quality, bool) else ""
    return Tile(path=path, note=f"{item.get('label')} → {item.get('suggested')}{rated}", image=_image(path))


def sections(report: dict) -> list[Section]:
    """Each kind of problem the report holds, bounded; kinds it found none of are left out."""
    unread = [Tile(path=str(item["path"]), note=str(item.get("problem") or "cannot be decoded"), image=False)
              for item in _dicts(report, "corrupt") if isinstance(item.get("path"), str)]
    unread += [Tile(path=path, note="empty", image=False) for path in _paths(report.get("empty"))]
    misnamed = [Tile(path=item["path"], note=f"{item.get('format')} content, named .{item.get('extension')}",
                     image=_image(item["path"]))
                for item in _dicts(report, "wrong_extension") if isinstance(item.get("path"), str)]
    issues = [tile for tile in map(_label_issue, _dicts(report, "label_issues")) if tile is not None]
    found = [
        _grouped(Section("exact-duplicates", "Exact duplicates", "Files with the same bytes."),
                 _dicts(report, "exact_duplicates"), _exact),
        _grouped(Section("near-duplicates", "Near duplicates", "Images whose perceptual hashes are at most "
                         f"{report.get('distance', '?')} bits apart; a group across splits is a leak."),
                 _dicts(report, "near_duplicates"), _near),
        _grouped(Section("leaks", "Leaks", "The same image in training and held-out splits."),
                 _dicts(report, "leaks"), _leak),
        _grouped(Section("label-conflicts", "Label conflicts", "The same image under different labels."),
                 _dicts(report, "label_conflicts"), _conflict),
        _flat(Section("unreadable", "Corrupt or empty", "Files that cannot be decoded, and empty files."), unread),
        _flat(Section("wrong-extension", "Wrong extension", "Files whose content is not what their extension "
                      "says."), misnamed),
        _flat(Section("label-issues", "Label issues", "Files whose label is likely wrong, with the label "
                      "suggested instead."), issues),
    ]
    return [section for section in found if section.total]


def _counts(report: dict) -> list[tuple[str, int | None]]:
    summary = report.get("summary") if isinstance(report.get("summary"), dict) else {}
    return [(str(key), value if isinstance(value, int) and not isinstance(value, bool) else None)
            for key, value in summary.items()]


def _balance(report: dict) -> tuple[list, int]:
    """The class balance as the dataset page's label bars, and how many labels they leave out."""
    balance = report.get("class_balance")
    counts = {str(label): count for label, count in balance.items()
              if isinstance(count, int) and not isinstance(count, bool)} if isinstance(balance, dict) else {}
    bars = label_bars({"labels": {"counts": counts}})
    return bars, len(counts) - len(bars)


def _drops(report: dict) -> list[tuple[str, str, int | None]]:
    """(kind, what it drops, how many files) for the clean form."""
    options = []
    for kind in DROP_KINDS:
        try:
            files = len(checks.dropped_paths(report, [kind]))
        except (AttributeError, TypeError):  # a report of another shape than the format's
            files = None
        options.append((kind, DROPS.get(kind, ""), files))
    return options


def _report(request: Request, principal: auth.Principal, project: str, name: str, check_id: int) -> CheckReport:
    found = checks.get_check(request.app.state.database, principal, check_id)
    if (found.project, found.dataset) != (project, name):
        raise NotFound(f"no cleaning report {check_id} of {project}/{name}", field="check_id")
    return found


def _newest_done(request: Request, principal: auth.Principal, shown: CheckReport) -> int | None:
    listed = checks.list_checks(request.app.state.database, principal, shown.project, shown.dataset, shown.version)
    return next((item.id for item in listed if item.state == "done"), None)


@router.get("/data/{project}/{name}/checks/{check_id}")
def report_page(request: Request, principal: PagePrincipal, project: Project, name: Name,
                check_id: CheckId) -> Response:
    try:
        shown = _report(request, principal, project, name, check_id)
        newest_done = _newest_done(request, principal, shown)
    except MlyardError as error:
        return _error(request, error, principal)
    report = shown.report if isinstance(shown.report, dict) else {}
    bars, unbarred = _balance(report)
    return page(request, "data_check.html", nav="data", principal=principal, check=shown, report=report,
                url=dataset_url(project, name), here=report_url(project, name, check_id),
                thumbnails=f"{version_url(project, name, shown.version)}/thumbnail",
                thumbnail_size=data_thumbnails.SIZES[0], sections=sections(report), counts=_counts(report),
                bars=bars, unbarred=unbarred, drops=_drops(report), newest_done=newest_done,
                may_clean=may_change(principal, project), tones=TONES, poll_seconds=POLL_SECONDS,
                choosing=may_change(principal, project) and shown.state == "done" and newest_done == shown.id,
                max_groups=MAX_GROUPS, notice=NOTICES.get(request.query_params.get("notice", "")))


@router.get("/data/{project}/{name}/checks/{check_id}/state")
def report_state(request: Request, principal: PagePrincipal, project: Project, name: Name,
                 check_id: CheckId) -> Response:
    """A running report's state, which its page polls; once it ends, htmx reloads the page."""
    try:
        shown = _report(request, principal, project, name, check_id)
    except MlyardError as error:
        return _error(request, error, principal)
    answer = page(request, "data_check_state.html", check=shown, tones=TONES, poll_seconds=POLL_SECONDS,
                  here=report_url(project, name, check_id))
    if shown.state != "running":
        answer.headers["HX-Refresh"] = "true"
    return answer


def _clean(request: Request, principal: auth.Principal, shown: CheckReport, asked: CleanRequest) -> VersionCreated:
    # The service cleans by the version's newest finished report: the form must be that report's,
    # or the files dropped would not be the ones this page showed.
    newest = _newest_done(request, principal, shown)
    if newest != shown.id:
        raise Conflict(f"cleaning goes by the newest finished report of {shown.version}"
                       + (f", report {newest}" if newest else "") + f"; report {shown.id} is not it",
                       field="check_id")
    return checks.clean(request.app.state.database, request.app.state.blobs, principal, shown.project,
                        shown.dataset, shown.version, asked)


@router.post("/data/{project}/{name}/checks/{check_id}/clean")
async def clean(request: Request, principal: ChangingPrincipal, project: Project, name: Name,
                check_id: CheckId) -> Response:
    """A child version without the files of the kinds ticked and the files chosen in the groups
    (`checks.clean`)."""
    fields = _fields(await request.body())
    kinds = list(dict.fromkeys(fields.get("drop") or []))
    try:
        asked = CleanRequest(drop=kinds, paths=list(dict.fromkeys(fields.get("path") or [])))
    except ValueError:
        return _error(request, InvalidRequest(f"tick at least one kind of file to drop, of {', '.join(DROP_KINDS)}, "
                                              "or files in the groups above", field="drop"), principal)
    try:
        shown = await run_in_threadpool(_report, request, principal, project, name, check_id)  # reads a whole report
        made = await run_in_threadpool(_clean, request, principal, shown, asked)
    except MlyardError as error:
        return _error(request, error, principal)
    if not made.created:
        return RedirectResponse(f"{report_url(project, name, check_id)}?notice=nothing-to-drop",
                                status_code=status.HTTP_303_SEE_OTHER)
    return RedirectResponse(f"{dataset_url(project, name)}?version={quote(made.version.version, safe='')}",
                            status_code=status.HTTP_303_SEE_OTHER)
