"""Who may call what: every operation of the API's own OpenAPI document, called by each kind
of caller, must give exactly the answer its rule allows. An operation without a rule here
fails the test, so a new route cannot ship unclassified.

Callers: anonymous; `outsider`, a member of another project; `viewer`, `member` and
`maintainer` of project P; the administrator. P holds a job of `member`'s, and datasets,
models and volumes `member` made. (A job token's reach is tests/security/test_job_token_reach.py's.)
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server

PERSONAS = ("anonymous", "outsider", "viewer", "member", "maintainer", "admin")
ANY_USER = frozenset(PERSONAS) - {"anonymous"}
PROJECT_READERS = frozenset({"viewer", "member", "maintainer", "admin"})
PROJECT_WRITERS = frozenset({"member", "maintainer", "admin"})
MAINTAINERS = frozenset({"maintainer", "admin"})
DATASET_MANAGERS = frozenset({"member", "maintainer", "admin"})
"""The owner of the matrix's datasets (`member`, who also makes its volumes) and their project's maintainers."""
ADMIN = frozenset({"admin"})
TASK_PEOPLE = frozenset({"member", "maintainer", "admin"})
"""Who sees the matrix's labeling task: its annotator, its maker and reviewer, an administrator."""
PASSWORD = "matrix pass 1"
_counter = itertools.count(1)


@dataclass
class World:
    server: RunningServer
    project: str
    other: str
    users: dict[str, str]
    tokens: dict[str, str]
    job: int
    spare_user: str
    grantee: str = ""
    """A project no caller is in, which datasets are shared with (sharing them with the outsider's
    would let them read what the other rules expect them not to see)."""
    data: str = ""
    """A directory under the server's MLYARD_DATA_ROOTS, to register."""
    dataset: str | None = None
    catalog: str | None = None
    check: int | None = None
    task: tuple[int, int] | None = None
    model: str | None = None

    def http(self, persona: str) -> httpx.Client:
        headers = {} if persona == "anonymous" else {"Authorization": f"Bearer {self.tokens[persona]}"}
        return httpx.Client(base_url=f"{self.server.url}/api/v1", headers=headers, timeout=60)

    def as_admin(self) -> httpx.Client:
        return self.http("admin")

    def fresh_job(self) -> int:
        """A queued-or-running job of `member` in P, to be cancelled."""
        with self.http("member") as http:
            answer = http.post("/jobs", json={"name": f"matrix-{next(_counter)}", "project": self.project,
                                              "command": ["sleep", "30"],
                                              "roles": [{"resources": {"cpu": 1, "memory": "64Mi"}}]})
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def fresh_queue(self) -> str:
        name = f"mq-{self.server.port}-{next(_counter)}"
        with self.as_admin() as http:
            assert http.put(f"/queues/{name}", json={"project": self.project}).status_code == 200
        return name

    def fresh_snapshot(self) -> str:
        """A snapshot P keeps that no unfinished job uses, to be released."""
        body = snapshot_archive(f"matrix {next(_counter)}")
        digest = hashlib.sha256(body).hexdigest()
        with self.http("member") as http:
            answer = http.put(f"/snapshots/{digest}", params={"project": self.project}, content=body,
                              headers={"Content-Type": "application/gzip"})
        assert answer.status_code == 201, answer.text
        return digest

    def fresh_environment(self) -> str:
        """An environment of P's, built by its maintainer (apt packages: without an engine it
        fails at once, cheaply)."""
        name = f"env-{next(_counter)}-{self.server.port}"
        with self.http("maintainer") as http:
            answer = http.post("/environments", json={"name": name, "project": self.project, "base": "busybox",
                                                      "apt": ["curl"]})
        assert answer.status_code == 202, answer.text
        return name

    def fresh_token_of_member(self) -> int:
        with self.http("member") as http:
            return http.post("/tokens", json={"name": "to revoke"}).json()["info"]["id"]

    def fresh_unowned(self) -> str:
        """A dataset of the default project nobody owns, registered by the administrator."""
        name = f"reg-{next(_counter)}-{self.server.port}"
        with self.as_admin() as http:
            answer = http.post("/datasets:register", json={"path": self.data, "name": name})
        assert answer.status_code == 201, answer.text
        return name

    def fresh_claim(self) -> int:
        """A pending claim of `member`'s, for P, of fresh unowned data."""
        with self.http("member") as http:
            answer = http.post(f"/datasets/default/{self.fresh_unowned()}/claims", json={"project": self.project})
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def fresh_request(self) -> int:
        """A pending request of the outsider's project to read the catalog dataset."""
        path = f"/datasets/{self.project}/{_catalog(self)}"
        with self.as_admin() as http:
            http.delete(f"{path}/grants/{self.other}")
        with self.http("outsider") as http:
            answer = http.post(f"{path}/requests", json={"project": self.other})
        assert answer.status_code in (200, 201), answer.text
        return answer.json()["id"]


def snapshot_archive(text: str) -> bytes:
    """A gzip tarball with one file: a valid code snapshot."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = text.encode()
        member = tarfile.TarInfo("train.py")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


@dataclass(frozen=True)
class Rule:
    allowed: frozenset[str] | None
    """None: public (no token needed)."""
    call: Callable[[World, httpx.Client], httpx.Response]
    hidden_from: frozenset[str] = frozenset()
    """Callers refused with 404 rather than 403: what they may not see does not exist for them."""


def _matrix_pack() -> bytes:
    from mlyard.storage.packs import encode

    return encode([(hashlib.sha256(b"matrix pack").hexdigest(), b"matrix pack")])


def _get(path: str) -> Callable[[World, httpx.Client], httpx.Response]:
    return lambda world, http: http.get(path.format(job=world.job, project=world.project))


def _push(http: httpx.Client, project: str, name: str, content: bytes, *,
          resource: str = "datasets") -> httpx.Response:
    """A version of one file (of a dataset, or a model): the file, then its manifest, uploaded by the caller."""
    digest = hashlib.sha256(content).hexdigest()
    http.put(f"/blobs/{digest}", content=content)
    manifest = json.dumps({"files": [{"path": "data.txt", "sha256": digest, "size": len(content)}]}).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    http.put(f"/blobs/{manifest_digest}", content=manifest)
    return http.post(f"/{resource}/{project}/{name}/versions", json={"manifest": manifest_digest})


def _dataset(world: World) -> str:
    """A dataset of P (visible to its readers only) with a v1, made once by `member`."""
    if world.dataset is None:
        name = f"md-{world.server.port}"
        with world.http("member") as http:
            assert http.post("/datasets", json={"name": name, "project": world.project}).status_code == 201
            assert _push(http, world.project, name, b"matrix data").status_code == 201
        world.dataset = name
    return world.dataset


def _catalog(world: World) -> str:
    """A `catalog` dataset of P (every user sees its card), made once by `member`."""
    if world.catalog is None:
        name = f"mc-{world.server.port}"
        with world.http("member") as http:
            answer = http.post("/datasets", json={"name": name, "project": world.project, "visibility": "catalog"})
            assert answer.status_code == 201, answer.text
        world.catalog = name
    return world.catalog


def _granted_first(world: World, http: httpx.Client) -> httpx.Response:
    path = f"/datasets/{world.project}/{_dataset(world)}/grants/{world.grantee}"
    with world.as_admin() as admin:
        assert admin.put(path).status_code == 200
    return http.delete(path)


def _answer_request(verb: str) -> Callable[[World, httpx.Client], httpx.Response]:
    return lambda world, http: http.post(
        f"/datasets/{world.project}/{_catalog(world)}/requests/{world.fresh_request()}/{verb}", json={})


def _fresh_dataset(world: World, *, versions: int) -> str:
    """A dataset of P made by `member` (its owner) for one call, with `versions` versions."""
    name = f"fd-{next(_counter)}"
    with world.http("member") as http:
        assert http.post("/datasets", json={"name": name, "project": world.project}).status_code == 201
        for _ in range(versions):
            assert _push(http, world.project, name, f"fresh {next(_counter)}".encode()).status_code == 201
    return name


def _check(world: World) -> int:
    """A cleaning report of the matrix's dataset, started by `member` once."""
    if world.check is None:
        with world.http("member") as http:
            made = http.post(f"/datasets/{world.project}/{_dataset(world)}/versions/v1/checks", json={})
            assert made.status_code == 202, made.text
            world.check = made.json()["id"]
    return world.check


def _task(world: World) -> tuple[int, int]:
    """A text labeling task of the matrix's dataset, made once by `maintainer` (who reviews it) for
    `member` to annotate, and its item with `member`'s submitted annotation."""
    if world.task is None:
        with world.http("maintainer") as http:
            made = http.post("/labeling/tasks", json={
                "name": f"matrix-task-{world.server.port}", "project": world.project, "dataset": _dataset(world),
                "kind": "text", "classes": ["a", "b"], "annotators": [world.users["member"]],
                "reviewers": [world.users["maintainer"]]})
            assert made.status_code == 201, made.text
        with world.http("member") as http:
            item = http.get(f"/labeling/tasks/{made.json()['id']}/next").json()["id"]
            saved = http.put(f"/labeling/tasks/{made.json()['id']}/items/{item}/annotation", json={"labels": ["b"]})
            assert saved.status_code == 200, saved.text
        world.task = (made.json()["id"], item)
    return world.task


def _fresh_volume(world: World) -> str:
    """A volume of P made by `member` for one call."""
    name = f"fv-{next(_counter)}"
    with world.http("member") as http:
        made = http.post("/volumes", json={"name": name, "project": world.project, "size": "1Mi"})
        assert made.status_code == 201, made.text
    return name


def _fresh_model(world: World, *, versions: int) -> str:
    """A model of P made by `member` (its owner), with `versions` versions."""
    name = f"fm-{next(_counter)}"
    with world.http("member") as http:
        assert http.post("/models", json={"name": name, "project": world.project}).status_code == 201
        for _ in range(versions):
            made = _push(http, world.project, name, f"weights {next(_counter)}".encode(), resource="models")
            assert made.status_code == 201, made.text
    return name


def _model(world: World) -> str:
    """A model of P with a v1, made once by `member`."""
    if world.model is None:
        world.model = _fresh_model(world, versions=1)
    return world.model


def _on_model(method: str, path: str, **kwargs) -> Callable[[World, httpx.Client], httpx.Response]:
    return lambda world, http: http.request(method, f"/models/{world.project}/{_model(world)}{path}", **kwargs)


def _on_dataset(method: str, path: str, **kwargs) -> Callable[[World, httpx.Client], httpx.Response]:
    return lambda world, http: http.request(method, f"/datasets/{world.project}/{_dataset(world)}{path}", **kwargs)


RULES: dict[str, Rule] = {
    "GET /api/v1/health": Rule(None, _get("/health")),
    "POST /api/v1/login": Rule(None, lambda w, h: h.post("/login", json={"user": w.users["member"],
                                                                          "password": PASSWORD})),
    "GET /api/v1/whoami": Rule(ANY_USER, _get("/whoami")),
    "GET /api/v1/users": Rule(ADMIN, _get("/users")),
    "POST /api/v1/users": Rule(ADMIN, lambda w, h: h.post("/users", json={"name": f"u{next(_counter)}-{w.server.port}"})),
    "PUT /api/v1/users/{name}/password": Rule(
        ADMIN, lambda w, h: h.put(f"/users/{w.spare_user}/password", json={"password": PASSWORD})),
    "GET /api/v1/tokens": Rule(ANY_USER, _get("/tokens")),
    "POST /api/v1/tokens": Rule(ANY_USER, lambda w, h: h.post("/tokens", json={"name": "matrix"})),
    "DELETE /api/v1/tokens/{token_id}": Rule(
        frozenset({"member", "admin"}), lambda w, h: h.delete(f"/tokens/{w.fresh_token_of_member()}"),
        hidden_from=frozenset({"outsider", "viewer", "maintainer"})),
    "GET /api/v1/audit": Rule(ADMIN, _get("/audit")),
    "GET /api/v1/projects": Rule(ANY_USER, _get("/projects")),
    "POST /api/v1/projects": Rule(ADMIN, lambda w, h: h.post("/projects", json={"name": f"np-{next(_counter)}"})),
    "GET /api/v1/projects/{name}": Rule(PROJECT_READERS, _get("/projects/{project}"),
                                        hidden_from=frozenset({"outsider"})),
    "PATCH /api/v1/projects/{name}": Rule(
        MAINTAINERS, lambda w, h: h.patch(f"/projects/{w.project}", json={"description": "changed"}),
        hidden_from=frozenset({"outsider"})),
    "PUT /api/v1/projects/{name}/members/{user}": Rule(
        MAINTAINERS, lambda w, h: h.put(f"/projects/{w.project}/members/{w.spare_user}", json={"role": "viewer"}),
        hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/projects/{name}/members/{user}": Rule(
        MAINTAINERS, lambda w, h: _remove_spare(w, h), hidden_from=frozenset({"outsider"})),
    "GET /api/v1/projects/{name}/snapshots": Rule(PROJECT_READERS, _get("/projects/{project}/snapshots"),
                                                  hidden_from=frozenset({"outsider"})),
    # Answered only once a snapshot is kept: maintainers get 404 for one the project does not keep.
    "DELETE /api/v1/projects/{name}/snapshots/{digest}": Rule(
        MAINTAINERS, lambda w, h: h.delete(f"/projects/{w.project}/snapshots/{w.fresh_snapshot()}"),
        hidden_from=frozenset({"outsider"})),
    # Environments belong to a project: its readers see them, its maintainers build and remove them.
    "GET /api/v1/environments": Rule(ANY_USER, _get("/environments")),
    "POST /api/v1/environments": Rule(MAINTAINERS, lambda w, h: h.post("/environments", json={
        "name": f"me-{next(_counter)}-{w.server.port}", "project": w.project, "base": "busybox", "apt": ["curl"]})),
    "GET /api/v1/environments/{name}": Rule(PROJECT_READERS, lambda w, h: h.get(
        f"/environments/{w.fresh_environment()}"), hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/environments/{name}": Rule(
        MAINTAINERS, lambda w, h: h.delete(f"/environments/{w.fresh_environment()}"),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/jobs": Rule(ANY_USER, _get("/jobs?all=true")),
    "POST /api/v1/jobs": Rule(PROJECT_WRITERS, lambda w, h: h.post("/jobs", json={
        "name": "matrix-submit", "project": w.project, "command": ["true"], "roles": [{"resources": {"cpu": 1}}]})),
    "POST /api/v1/jobs:batch": Rule(PROJECT_WRITERS, lambda w, h: h.post("/jobs:batch", json={"jobs": [{"spec": {
        "name": "matrix-batch", "project": w.project, "command": ["true"], "roles": [{"resources": {"cpu": 1}}]}}]})),
    "GET /api/v1/jobs/{job_id}": Rule(PROJECT_READERS, _get("/jobs/{job}"), hidden_from=frozenset({"outsider"})),
    "POST /api/v1/jobs/{job_id}/cancel": Rule(
        frozenset({"member", "maintainer", "admin"}), lambda w, h: h.post(f"/jobs/{w.fresh_job()}/cancel"),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/jobs/{job_id}/logs": Rule(PROJECT_READERS, _get("/jobs/{job}/logs"),
                                           hidden_from=frozenset({"outsider"})),
    "POST /api/v1/jobs/{job_id}/metrics": Rule(
        PROJECT_WRITERS, lambda w, h: h.post(f"/jobs/{w.job}/metrics", json={"step": 1, "metrics": {"loss": 1.0}}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/jobs/{job_id}/metrics": Rule(PROJECT_READERS, _get("/jobs/{job}/metrics"),
                                              hidden_from=frozenset({"outsider"})),
    "GET /api/v1/jobs/{job_id}/resources": Rule(PROJECT_READERS, _get("/jobs/{job}/resources"),
                                                hidden_from=frozenset({"outsider"})),
    "GET /api/v1/jobs/{job_id}/tensorboard": Rule(PROJECT_READERS, _get("/jobs/{job}/tensorboard"),
                                                  hidden_from=frozenset({"outsider"})),
    "GET /api/v1/resources/jobs": Rule(ANY_USER, _get("/resources/jobs")),
    "GET /api/v1/nodes": Rule(ANY_USER, _get("/nodes")),
    "GET /api/v1/nodes/{name}/samples": Rule(ANY_USER, lambda w, h: h.get(f"/nodes/{_node(w)}/samples")),
    "GET /api/v1/usage": Rule(ANY_USER, _get("/usage")),
    "GET /api/v1/queues": Rule(ANY_USER, _get("/queues")),
    "GET /api/v1/queues/{name}": Rule(ANY_USER, _get("/queues/default")),
    "PUT /api/v1/queues/{name}": Rule(
        MAINTAINERS, lambda w, h: h.put(f"/queues/{w.fresh_queue()}", json={"weight": 2})),
    "DELETE /api/v1/queues/{name}": Rule(MAINTAINERS, lambda w, h: h.delete(f"/queues/{w.fresh_queue()}")),
    # Any user may upload; asking answers 404 unless the caller may name the digest (none may here).
    "PUT /api/v1/snapshots/{digest}": Rule(
        ANY_USER, lambda w, h: h.put(f"/snapshots/{'0' * 64}", content=b"not a tarball",
                                     headers={"Content-Type": "application/gzip"})),
    "GET /api/v1/snapshots/{digest}": Rule(ANY_USER, _get(f"/snapshots/{'0' * 64}")),
    # Datasets: the readers of their project see them (others are told none exists), members add
    # versions and move aliases; any user may upload file blobs (a digest is a key only for them).
    "POST /api/v1/datasets": Rule(PROJECT_WRITERS, lambda w, h: h.post("/datasets", json={
        "name": f"nd-{next(_counter)}", "project": w.project})),
    "GET /api/v1/datasets": Rule(ANY_USER, _get("/datasets")),
    "GET /api/v1/datasets/{project}/{name}": Rule(PROJECT_READERS, _on_dataset("GET", ""),
                                                  hidden_from=frozenset({"outsider"})),
    "POST /api/v1/datasets/{project}/{name}/versions": Rule(
        PROJECT_WRITERS, lambda w, h: _push(h, w.project, _dataset(w), f"v {next(_counter)}".encode()),
        hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/datasets/{project}/{name}/versions/{version}": Rule(
        DATASET_MANAGERS, lambda w, h: h.delete(f"/datasets/{w.project}/{_fresh_dataset(w, versions=1)}/versions/v1"),
        hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/datasets/{project}/{name}": Rule(
        DATASET_MANAGERS, lambda w, h: h.delete(f"/datasets/{w.project}/{_fresh_dataset(w, versions=0)}"),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/versions": Rule(PROJECT_READERS, _on_dataset("GET", "/versions"),
                                                           hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/versions/{version}": Rule(
        PROJECT_READERS, _on_dataset("GET", "/versions/v1"), hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/versions/{version}/files": Rule(
        PROJECT_READERS, _on_dataset("GET", "/versions/v1/files"), hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/versions/{version}/file": Rule(
        PROJECT_READERS, _on_dataset("GET", "/versions/v1/file", params={"path": "data.txt"}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/diff": Rule(
        PROJECT_READERS, _on_dataset("GET", "/diff", params={"before": "v1", "after": "latest"}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/aliases": Rule(PROJECT_READERS, _on_dataset("GET", "/aliases"),
                                                          hidden_from=frozenset({"outsider"})),
    "PUT /api/v1/datasets/{project}/{name}/aliases/{alias}": Rule(
        PROJECT_WRITERS, _on_dataset("PUT", "/aliases/stable", json={"version": "v1"}),
        hidden_from=frozenset({"outsider"})),
    # Sharing: the owner and the project's maintainers grant other projects, and answer requests
    # made from the catalog by members of other projects; a request names the requester's project.
    "GET /api/v1/datasets/{project}/{name}/grants": Rule(PROJECT_READERS, _on_dataset("GET", "/grants"),
                                                         hidden_from=frozenset({"outsider"})),
    "PUT /api/v1/datasets/{project}/{name}/grants/{grantee_project}": Rule(
        DATASET_MANAGERS, lambda w, h: h.put(f"/datasets/{w.project}/{_dataset(w)}/grants/{w.grantee}"),
        hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/datasets/{project}/{name}/grants/{grantee_project}": Rule(
        DATASET_MANAGERS, _granted_first, hidden_from=frozenset({"outsider"})),
    "POST /api/v1/datasets/{project}/{name}/requests": Rule(
        frozenset({"outsider", "admin"}), lambda w, h: h.post(f"/datasets/{w.project}/{_catalog(w)}/requests",
                                                              json={"project": w.other})),
    "GET /api/v1/datasets/{project}/{name}/requests": Rule(DATASET_MANAGERS, _on_dataset("GET", "/requests"),
                                                           hidden_from=frozenset({"outsider"})),
    "POST /api/v1/datasets/{project}/{name}/requests/{request_id}/grant": Rule(
        DATASET_MANAGERS, _answer_request("grant")),
    "POST /api/v1/datasets/{project}/{name}/requests/{request_id}/refuse": Rule(
        DATASET_MANAGERS, _answer_request("refuse")),
    # Cleaning reports: a job of the dataset's project makes one (its members start it), its
    # readers see them; cleaning makes a version (members; 409 here, no report being done).
    "POST /api/v1/datasets/{project}/{name}/versions/{version}/checks": Rule(
        PROJECT_WRITERS, _on_dataset("POST", "/versions/v1/checks", json={"distance": 4}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/{project}/{name}/versions/{version}/checks": Rule(
        PROJECT_READERS, _on_dataset("GET", "/versions/v1/checks"), hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/checks/{check_id}/report": Rule(
        PROJECT_READERS, lambda w, h: h.get(f"/datasets/checks/{_check(w)}/report"),
        hidden_from=frozenset({"outsider"})),
    "POST /api/v1/datasets/{project}/{name}/versions/{version}/clean": Rule(
        PROJECT_WRITERS, _on_dataset("POST", "/versions/v1/clean", json={"drop": ["duplicates"]}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/requests": Rule(ANY_USER, _get("/datasets/requests")),
    # Ownership: administrators register data and decide claims of it; a transfer is asked by the
    # owner or the project's maintainers (its decision, by the receiving project's maintainers,
    # shares the claims' routes and is tested in test_dataset_sharing.py).
    "POST /api/v1/datasets:register": Rule(ADMIN, lambda w, h: h.post("/datasets:register", json={
        "path": w.data, "name": f"mr-{next(_counter)}"})),
    "POST /api/v1/datasets/{project}/{name}/claims": Rule(
        PROJECT_WRITERS, lambda w, h: h.post(f"/datasets/default/{w.fresh_unowned()}/claims",
                                             json={"project": w.project})),
    "POST /api/v1/datasets/{project}/{name}/transfers": Rule(
        DATASET_MANAGERS, _on_dataset("POST", "/transfers", json={"to_project": "default", "to_user": "admin"}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/datasets/claims": Rule(ANY_USER, _get("/datasets/claims")),
    "POST /api/v1/datasets/claims/{claim_id}/approve": Rule(
        ADMIN, lambda w, h: h.post(f"/datasets/claims/{w.fresh_claim()}/approve", json={})),
    "POST /api/v1/datasets/claims/{claim_id}/refuse": Rule(
        ADMIN, lambda w, h: h.post(f"/datasets/claims/{w.fresh_claim()}/refuse", json={})),
    # Labeling tasks: members of the dataset's project make them; a task is seen by who made it, the
    # project's maintainers and its annotators and reviewers (`member` annotates the matrix's task,
    # `maintainer` made and reviews it); only annotators label, only reviewers and managers review.
    "POST /api/v1/labeling/tasks": Rule(PROJECT_WRITERS, lambda w, h: h.post("/labeling/tasks", json={
        "name": f"mt-{next(_counter)}", "project": w.project, "dataset": _dataset(w), "kind": "text",
        "classes": ["a", "b"], "annotators": [w.users["member"]]}), hidden_from=frozenset({"outsider"})),
    "GET /api/v1/labeling/tasks": Rule(ANY_USER, _get("/labeling/tasks")),
    "GET /api/v1/labeling/tasks/{task_id}": Rule(
        TASK_PEOPLE, lambda w, h: h.get(f"/labeling/tasks/{_task(w)[0]}"), hidden_from=frozenset({"outsider", "viewer"})),
    "GET /api/v1/labeling/tasks/{task_id}/items": Rule(
        TASK_PEOPLE, lambda w, h: h.get(f"/labeling/tasks/{_task(w)[0]}/items"),
        hidden_from=frozenset({"outsider", "viewer"})),
    "GET /api/v1/labeling/tasks/{task_id}/next": Rule(
        frozenset({"member"}), lambda w, h: h.get(f"/labeling/tasks/{_task(w)[0]}/next"),
        hidden_from=frozenset({"outsider", "viewer"})),
    "PUT /api/v1/labeling/tasks/{task_id}/items/{item_id}/annotation": Rule(
        frozenset({"member"}), lambda w, h: h.put(f"/labeling/tasks/{_task(w)[0]}/items/{_task(w)[1]}/annotation",
                                                  json={"labels": ["a"]}),
        hidden_from=frozenset({"outsider", "viewer"})),
    "GET /api/v1/labeling/tasks/{task_id}/agreement": Rule(
        TASK_PEOPLE, lambda w, h: h.get(f"/labeling/tasks/{_task(w)[0]}/agreement"),
        hidden_from=frozenset({"outsider", "viewer"})),
    "GET /api/v1/labeling/tasks/{task_id}/label-studio": Rule(
        TASK_PEOPLE, lambda w, h: h.get(f"/labeling/tasks/{_task(w)[0]}/label-studio"),
        hidden_from=frozenset({"outsider", "viewer"})),
    "POST /api/v1/labeling/tasks/{task_id}/export": Rule(
        TASK_PEOPLE, lambda w, h: h.post(f"/labeling/tasks/{_task(w)[0]}/export", json={"format": "csv"}),
        hidden_from=frozenset({"outsider", "viewer"})),
    "POST /api/v1/labeling/tasks/{task_id}/items/{item_id}/review": Rule(
        MAINTAINERS, lambda w, h: h.post(f"/labeling/tasks/{_task(w)[0]}/items/{_task(w)[1]}/review",
                                         json={"annotator": w.users["member"], "accept": False, "comment": "again"}),
        hidden_from=frozenset({"outsider", "viewer"})),
    # Volumes: their project's readers see them, its members make and mount them; who made one and
    # the project's maintainers remove it.
    "POST /api/v1/volumes": Rule(PROJECT_WRITERS, lambda w, h: h.post("/volumes", json={
        "name": f"nv-{next(_counter)}", "project": w.project, "size": "1Mi"})),
    "GET /api/v1/volumes": Rule(ANY_USER, _get("/volumes")),
    "GET /api/v1/volumes/{project}/{name}": Rule(
        PROJECT_READERS, lambda w, h: h.get(f"/volumes/{w.project}/{_fresh_volume(w)}"),
        hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/volumes/{project}/{name}": Rule(
        DATASET_MANAGERS, lambda w, h: h.delete(f"/volumes/{w.project}/{_fresh_volume(w)}"),
        hidden_from=frozenset({"outsider"})),
    # Models: the readers of their project see them, members add versions (pushed here; a job's
    # files are registered through the same operation) and move aliases; their owner and the
    # project's maintainers remove.
    "POST /api/v1/models": Rule(PROJECT_WRITERS, lambda w, h: h.post("/models", json={
        "name": f"nm-{next(_counter)}", "project": w.project})),
    "GET /api/v1/models": Rule(ANY_USER, _get("/models")),
    "GET /api/v1/models/{project}/{name}": Rule(PROJECT_READERS, _on_model("GET", ""),
                                                hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/models/{project}/{name}": Rule(
        DATASET_MANAGERS, lambda w, h: h.delete(f"/models/{w.project}/{_fresh_model(w, versions=0)}"),
        hidden_from=frozenset({"outsider"})),
    "POST /api/v1/models/{project}/{name}/versions": Rule(
        PROJECT_WRITERS,
        lambda w, h: _push(h, w.project, _model(w), f"m {next(_counter)}".encode(), resource="models"),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/models/{project}/{name}/versions": Rule(PROJECT_READERS, _on_model("GET", "/versions"),
                                                         hidden_from=frozenset({"outsider"})),
    "GET /api/v1/models/{project}/{name}/versions/{version}": Rule(
        PROJECT_READERS, _on_model("GET", "/versions/v1"), hidden_from=frozenset({"outsider"})),
    "DELETE /api/v1/models/{project}/{name}/versions/{version}": Rule(
        DATASET_MANAGERS, lambda w, h: h.delete(f"/models/{w.project}/{_fresh_model(w, versions=1)}/versions/v1"),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/models/{project}/{name}/versions/{version}/files": Rule(
        PROJECT_READERS, _on_model("GET", "/versions/v1/files"), hidden_from=frozenset({"outsider"})),
    "GET /api/v1/models/{project}/{name}/versions/{version}/file": Rule(
        PROJECT_READERS, _on_model("GET", "/versions/v1/file", params={"path": "data.txt"}),
        hidden_from=frozenset({"outsider"})),
    "GET /api/v1/models/{project}/{name}/aliases": Rule(PROJECT_READERS, _on_model("GET", "/aliases"),
                                                        hidden_from=frozenset({"outsider"})),
    "PUT /api/v1/models/{project}/{name}/aliases/{alias}": Rule(
        PROJECT_WRITERS, _on_model("PUT", "/aliases/production", json={"version": "v1"}),
        hidden_from=frozenset({"outsider"})),
    "POST /api/v1/blobs:missing": Rule(ANY_USER, lambda w, h: h.post("/blobs:missing", json={"digests": ["0" * 64]})),
    "PUT /api/v1/blobs/{digest}": Rule(ANY_USER, lambda w, h: h.put(
        f"/blobs/{hashlib.sha256(b'matrix blob').hexdigest()}", content=b"matrix blob")),
    "PUT /api/v1/blobs/pack": Rule(ANY_USER, lambda w, h: h.put("/blobs/pack", content=_matrix_pack())),
}


def _node(world: World) -> str:
    with world.as_admin() as http:
        return http.get("/nodes").json()[0]["name"]


def _remove_spare(world: World, http: httpx.Client) -> httpx.Response:
    with world.as_admin() as admin:
        admin.put(f"/projects/{world.project}/members/{world.spare_user}", json={"role": "viewer"})
    return http.delete(f"/projects/{world.project}/members/{world.spare_user}")


@pytest.fixture(scope="module", params=DATABASES)
def matrix_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server of its own: the jobs the matrix queues must not hold up other tests."""
    base = tmp_path_factory.mktemp(f"mlyard-matrix-{request.param}")
    (base / "roots" / "data").mkdir(parents=True)
    (base / "roots" / "data" / "file.txt").write_text("registered\n")
    running = start_server(base / "home", database=request.param, MLYARD_DATA_ROOTS=str(base / "roots"))
    yield running
    with running.client() as admin:
        for job in admin.jobs():
            admin.cancel(job.id)
    stop_server(running)


@pytest.fixture(scope="module")
def world(matrix_server: RunningServer) -> World:
    server = matrix_server
    port = server.port
    project, other, grantee = f"mp-{port}", f"mo-{port}", f"mg-{port}"
    users = {persona: f"{persona}-{port}" for persona in ("outsider", "viewer", "member", "maintainer")}
    spare = f"spare-{port}"
    with server.client() as admin:
        admin.create_project(project)
        admin.create_project(other)
        admin.create_project(grantee)
        for persona, name in users.items():
            admin.create_user(name, password=PASSWORD)
            admin.set_member(other if persona == "outsider" else project, name,
                             "member" if persona == "outsider" else persona)
        admin.create_user(spare, password=PASSWORD)
    tokens = {"admin": server.token()}
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        for persona, name in users.items():
            tokens[persona] = http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]
    world = World(server=server, project=project, other=other, users=users, tokens=tokens, job=0, spare_user=spare,
                  grantee=grantee, data=str(server.home.parent / "roots" / "data"))
    world.job = world.fresh_job()
    return world


def test_every_operation_has_a_rule(matrix_server: RunningServer) -> None:
    paths = httpx.get(f"{matrix_server.url}/api/v1/openapi.json").json()["paths"]
    operations = {f"{method.upper()} {path}" for path, methods in paths.items() for method in methods}
    assert operations - set(RULES) == set(), "classify these operations in RULES"
    assert set(RULES) - operations == set(), "these rules name operations that no longer exist"


@pytest.mark.parametrize("operation", sorted(RULES))
def test_each_caller_gets_exactly_its_answer(world: World, operation: str) -> None:
    rule = RULES[operation]
    answers = {}
    for persona in PERSONAS:
        with world.http(persona) as http:
            answers[persona] = rule.call(world, http)
    for persona, answer in answers.items():
        status = answer.status_code
        assert status < 500, f"{operation} as {persona}: {status} {answer.text}"
        if rule.allowed is None or persona in rule.allowed:
            assert status not in (401, 403) and not (status == 404 and persona in rule.hidden_from), (
                f"{operation} as {persona} should be allowed, got {status} {answer.text}")
        elif persona == "anonymous":
            assert status == 401, f"{operation} as anonymous: {status}"
        else:
            expected = 404 if persona in rule.hidden_from else 403
            assert status == expected, f"{operation} as {persona}: expected {expected}, got {status} {answer.text}"
