"""The Data pages: the catalog (`/data`) and a dataset's page (`/data/{project}/{name}`), with
its card, version graph, the selected version's statistics and lineage, its aliases, access
requests (asked for by catalog readers without access, answered by its owner and maintainers) and,
for registered data nobody owns, claims (asked for by members of a project, decided by administrators).

Every read and action goes through `services.datasets` with the page's principal, as the API's
routes do, so the pages show and do exactly what the session's user may; nothing here decides
access. Descriptions are Markdown rendered with raw HTML and images off (`markdown`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import RedirectResponse
from markdown_it import MarkdownIt
from markupsafe import Markup
from starlette.responses import Response

from mlyard.api.datasets import (LATEST, AccessRequestCreate, AccessRequestInfo, ClaimCreate, ClaimInfo, DatasetInfo,
                                 VersionInfo)
from mlyard.errors import Forbidden, InvalidRequest, MlyardError
from mlyard.server import auth
from mlyard.server.services.datasets import aliases, catalog, claims, sharing, versions
from mlyard.spec import NAME_PATTERN
from mlyard.web.session import MAX_FORM_BYTES, ChangingPrincipal, PagePrincipal
from mlyard.web.templating import page

router = APIRouter(include_in_schema=False)

Project = Annotated[str, Path(pattern=NAME_PATTERN)]
Name = Annotated[str, Path(pattern=NAME_PATTERN)]
REFERENCE = r"^(v[1-9][0-9]{0,8}|[a-z][a-z0-9-]{0,62})$"
"""vN or an alias, as the API's routes take them."""
Reference = Annotated[str, Path(pattern=REFERENCE)]
RequestId = Annotated[int, Path(ge=1, le=2**63 - 1)]
ClaimId = Annotated[int, Path(ge=1, le=2**63 - 1)]
NOTICES = {
    "requested": "Access requested: the dataset's owner and its project's maintainers see your request here.",
    "granted": "Request granted: that project's readers read the dataset's files from now on.",
    "refused": "Request refused.",
    "claimed": "Claim asked: once an administrator approves it, the dataset moves to that project with you as "
               "its owner.",
    "claim-approved": "Claim approved: the dataset is now its claimer's, in the project claimed for.",
    "claim-refused": "Claim refused.",
}

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).disable("image")
"""No raw HTML (it is shown as text) and no images (they would load other sites' pixels, which
the Content-Security-Policy refuses anyway); markdown-it refuses javascript: and data: links."""


def markdown(text: str) -> Markup:
    """A description as HTML: safe to insert, since every tag in it is markdown-it's own."""
    return Markup(_markdown.render(text or ""))


def dataset_url(project: str, name: str) -> str:
    return f"/data/{quote(project, safe='')}/{quote(name, safe='')}"


def _error(request: Request, error: MlyardError, principal: auth.Principal | None = None) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal, nav="data")


def _form(body: bytes) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", errors="replace")).items()}


def _clean(value: str) -> str:
    """A filter's text, without the NUL that PostgreSQL cannot compare."""
    return value.replace("\x00", "").strip()


@router.get("/data")
def catalog_page(request: Request, principal: PagePrincipal,
                 search: Annotated[str, Query(alias="q", max_length=200)] = "",
                 tag: Annotated[str, Query(max_length=63)] = "",
                 owner: Annotated[str, Query(max_length=128)] = "") -> Response:
    """Every dataset the caller may see (their projects', those granted to them, the catalog's
    cards), filtered by words of the name or description, a tag and an owner."""
    search, tag, owner = _clean(search), _clean(tag).lower(), _clean(owner)
    try:
        rows = catalog.list_datasets(request.app.state.database, principal, search=search or None,
                                     tag=tag or None, owner=owner or None)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "data.html", nav="data", principal=principal, datasets=rows, latest=LATEST,
                filters={"q": search, "tag": tag, "owner": owner}, filtered=bool(search or tag or owner),
                dataset_url=dataset_url)


@dataclass(frozen=True)
class GraphNode:
    version: str
    parent: str | None
    x: int
    y: int


@dataclass(frozen=True)
class VersionGraph:
    nodes: list[GraphNode]
    edges: list[tuple[GraphNode, GraphNode]]
    width: int
    height: int


LANE_WIDTH, ROW_HEIGHT, MARGIN = 28, 34, 16


def version_graph(listing: list[VersionInfo]) -> VersionGraph:
    """Each version a row (oldest first), in its parent's lane unless a sibling took it, then
    in a new lane; an edge from every parent to its children."""
    lanes: dict[str, int] = {}
    taken: set[str] = set()
    next_lane = 0
    nodes: dict[str, GraphNode] = {}
    for row, version in enumerate(listing):
        parent = version.parent if version.parent in lanes else None
        if parent is not None and parent not in taken:
            lane = lanes[parent]
            taken.add(parent)
        else:
            lane, next_lane = next_lane, next_lane + 1
        lanes[version.version] = lane
        nodes[version.version] = GraphNode(version=version.version, parent=parent, x=MARGIN + lane * LANE_WIDTH,
                                           y=MARGIN + row * ROW_HEIGHT)
    edges = [(nodes[node.parent], node) for node in nodes.values() if node.parent is not None]
    return VersionGraph(nodes=list(nodes.values()), edges=edges, width=2 * MARGIN + max(next_lane - 1, 0) * LANE_WIDTH,
                        height=2 * MARGIN + max(len(listing) - 1, 0) * ROW_HEIGHT)


@dataclass(frozen=True)
class FolderBar:
    folder: str
    files: int
    bytes: int
    percent: float


def label_bars(statistics: dict, limit: int = 30) -> list[FolderBar]:
    """Files (or annotations) per label, most first, as bars against the largest (`bytes` 0)."""
    labelled = statistics.get("labels") if isinstance(statistics, dict) else None
    counts = labelled.get("counts") if isinstance(labelled, dict) else None
    if not isinstance(counts, dict):
        return []
    counted = sorted(((str(label), int(count)) for label, count in counts.items()),
                     key=lambda item: (-item[1], item[0]))[:limit]
    most = max((count for _, count in counted), default=0) or 1
    return [FolderBar(folder=label, files=count, bytes=0, percent=round(100 * count / most, 1))
            for label, count in counted]


def folder_bars(statistics: dict, limit: int = 30) -> list[FolderBar]:
    """Files per top-level folder, most first, as bars against the largest."""
    folders = statistics.get("folders") if isinstance(statistics, dict) else None
    if not isinstance(folders, dict):
        return []
    counted = sorted(((str(folder), int(figures.get("files", 0)), int(figures.get("bytes", 0)))
                      for folder, figures in folders.items() if isinstance(figures, dict)),
                     key=lambda item: (-item[1], item[0]))[:limit]
    most = max((files for _, files, _ in counted), default=0) or 1
    return [FolderBar(folder=folder, files=files, bytes=size, percent=round(100 * files / most, 1))
            for folder, files, size in counted]


def _requests(database, principal: auth.Principal, dataset: DatasetInfo) -> list[AccessRequestInfo] | None:
    """The pending requests, for those who may answer them; None for everyone else."""
    try:
        return sharing.list_requests(database, principal, dataset.project, dataset.name)
    except Forbidden:
        return None


def _my_pending(database, principal: auth.Principal, dataset: DatasetInfo) -> list[AccessRequestInfo]:
    mine = sharing.list_all_requests(database, principal, mine=True, status="pending")
    return [asked for asked in mine if (asked.dataset_project, asked.dataset) == (dataset.project, dataset.name)]


def _asking_projects(principal: auth.Principal, dataset: DatasetInfo) -> list[str]:
    """The caller's projects that could ask to read it (member and up, not its own)."""
    return sorted(project for project, role in principal.roles.items()
                  if role >= auth.Role.MEMBER and project != dataset.project)


def _unowned_claims(database, principal: auth.Principal, dataset: DatasetInfo, *, mine: bool) -> list[ClaimInfo]:
    """The pending claims on this dataset: the caller's own (`mine`), or those the caller may
    decide (`list_claims` gives claims to administrators only)."""
    if dataset.owner is not None:
        return []
    listed = claims.list_claims(database, principal, mine=mine, status="pending",
                                dataset=(dataset.project, dataset.name))
    return [asked for asked in listed if asked.kind == "claim"]


def _member_projects(principal: auth.Principal) -> list[str]:
    """The caller's projects where they could claim it: those where they are a member and up."""
    return sorted(project for project, role in principal.roles.items() if role >= auth.Role.MEMBER)


def _dataset_context(request: Request, principal: auth.Principal, project: str, name: str,
                     chosen: str | None) -> dict:
    database = request.app.state.database
    dataset = catalog.get_dataset(database, principal, project, name)
    listing = versions.list_versions(database, principal, project, name)
    reference = chosen or (LATEST if LATEST in dataset.aliases else (listing[-1].version if listing else None))
    selected = versions.get_version(database, principal, project, name, reference) if reference else None
    return {
        "dataset": dataset, "versions": listing, "selected": selected,
        "graph": version_graph(listing), "bars": folder_bars(selected.statistics) if selected else [],
        "label_bars": label_bars(selected.statistics) if selected else [],
        "aliases": aliases.list_aliases(database, principal, project, name),
        "requests": _requests(database, principal, dataset),
        "my_pending": [] if dataset.readable else _my_pending(database, principal, dataset),
        "asking_projects": [] if dataset.readable else _asking_projects(principal, dataset),
        "my_claims": _unowned_claims(database, principal, dataset, mine=True),
        "claims_to_decide": _unowned_claims(database, principal, dataset, mine=False),
        "claiming_projects": _member_projects(principal) if dataset.owner is None else [],
        "url": dataset_url(project, name), "description": markdown(dataset.description),
    }


@router.get("/data/{project}/{name}")
def dataset_page(request: Request, principal: PagePrincipal, project: Project, name: Name,
                 version: Annotated[str | None, Query(pattern=REFERENCE)] = None) -> Response:
    try:
        context = _dataset_context(request, principal, project, name, version)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "data_dataset.html", nav="data", principal=principal,
                notice=NOTICES.get(request.query_params.get("notice", "")), **context)


def _back(project: str, name: str, notice: str) -> Response:
    return RedirectResponse(f"{dataset_url(project, name)}?notice={notice}", status_code=status.HTTP_303_SEE_OTHER)


@router.post("/data/{project}/{name}/requests")
async def ask_for_access(request: Request, principal: ChangingPrincipal, project: Project, name: Name) -> Response:
    """A catalog reader asks for a project of theirs to read the dataset (`sharing.request_access`)."""
    fields = _form(await request.body())
    asked = fields.get("project") or None
    try:
        made = AccessRequestCreate(project=asked, message=fields.get("message", "")[:10_000])
    except ValueError:
        return _error(request, InvalidRequest("name one of your projects", field="project"), principal)
    try:
        sharing.request_access(request.app.state.database, principal, project, name, made)
    except MlyardError as error:
        return _error(request, error, principal)
    return _back(project, name, "requested")


def _answer(request: Request, principal: auth.Principal, project: str, name: str, request_id: int, *,
            grant: bool) -> Response:
    try:
        sharing.answer_request(request.app.state.database, principal, project, name, request_id, grant=grant)
    except MlyardError as error:
        return _error(request, error, principal)
    return _back(project, name, "granted" if grant else "refused")


@router.post("/data/{project}/{name}/requests/{request_id}/grant")
def grant_request(request: Request, principal: ChangingPrincipal, project: Project, name: Name,
                  request_id: RequestId) -> Response:
    return _answer(request, principal, project, name, request_id, grant=True)


@router.post("/data/{project}/{name}/requests/{request_id}/refuse")
def refuse_request(request: Request, principal: ChangingPrincipal, project: Project, name: Name,
                   request_id: RequestId) -> Response:
    return _answer(request, principal, project, name, request_id, grant=False)


@router.post("/data/{project}/{name}/claims")
async def claim_dataset(request: Request, principal: ChangingPrincipal, project: Project, name: Name) -> Response:
    """A member of a project asks for registered data nobody owns for it (`claims.claim`)."""
    fields = _form(await request.body())
    try:
        made = ClaimCreate(project=fields.get("project", ""), message=fields.get("message", "")[:10_000])
    except ValueError:
        return _error(request, InvalidRequest("name one of your projects", field="project"), principal)
    try:
        claims.claim(request.app.state.database, principal, project, name, made)
    except MlyardError as error:
        return _error(request, error, principal)
    return _back(project, name, "claimed")


def _decide(request: Request, principal: auth.Principal, claim_id: int, *, approve: bool) -> Response:
    try:
        decided = claims.decide(request.app.state.database, principal, claim_id, approve=approve)
    except MlyardError as error:
        return _error(request, error, principal)
    # An approved claim moves the dataset: its page is now under the claimed project.
    return _back(decided.dataset_project, decided.dataset, "claim-approved" if approve else "claim-refused")


@router.post("/data/{project}/{name}/claims/{claim_id}/approve")
def approve_claim(request: Request, principal: ChangingPrincipal, project: Project, name: Name,
                  claim_id: ClaimId) -> Response:
    return _decide(request, principal, claim_id, approve=True)


@router.post("/data/{project}/{name}/claims/{claim_id}/refuse")
def refuse_claim(request: Request, principal: ChangingPrincipal, project: Project, name: Name,
                 claim_id: ClaimId) -> Response:
    return _decide(request, principal, claim_id, approve=False)
