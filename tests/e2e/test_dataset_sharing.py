"""Sharing datasets and moving their ownership through the real CLI and server, on SQLite and
PostgreSQL: share and unshare across projects and who may then pull; access requests granted
and refused, each role getting its answer and the requester seeing it; registering data under
MLYARD_DATA_ROOTS (and refusing what leads out of them), claiming it and transferring it; the
audit log holding every step."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server

PASSWORD = "sharing pass 1"


@dataclass
class Team:
    server: RunningServer
    roots: Path
    a: str
    """Project of the data: alice is its member (and the datasets' owner), mallory its
    maintainer, vic its viewer."""
    b: str
    """bob's project (he is a viewer there)."""
    c: str
    """carol's project (she is a member there)."""
    users: dict[str, str]
    tokens: dict[str, str]

    def as_(self, who: str) -> RunningServer:
        """The server, driven by the CLI as `who` (the administrator for "admin")."""
        if who == "admin":
            return self.server
        return replace(self.server, env={**self.server.env, "MLYARD_TOKEN": self.tokens[who]})

    def http(self, who: str) -> httpx.Client:
        token = self.server.token() if who == "admin" else self.tokens[who]
        return httpx.Client(base_url=f"{self.server.url}/api/v1", headers={"Authorization": f"Bearer {token}"},
                            timeout=60)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module", params=DATABASES)
def team(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    base = tmp_path_factory.mktemp(f"sharing-{request.param}")
    roots = base / "roots"
    roots.mkdir()
    server = start_server(base / "home", database=request.param, MLYARD_DATA_ROOTS=f"{roots}:/nonexistent-root")
    a, b, c = (f"{letter}-{server.port}" for letter in "abc")
    roles = {"alice": (a, "member"), "mallory": (a, "maintainer"), "vic": (a, "viewer"), "bob": (b, "viewer"),
             "carol": (c, "member")}
    users = {who: f"{who}-{server.port}" for who in roles}
    with server.client() as admin:
        for project in (a, b, c):
            admin.create_project(project)
        for who, (project, role) in roles.items():
            admin.create_user(users[who], password=PASSWORD)
            admin.set_member(project, users[who], role)
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        tokens = {who: http.post("/login", json={"user": name, "password": PASSWORD}).json()["token"]
                  for who, name in users.items()}
    yield Team(server=server, roots=roots, a=a, b=b, c=c, users=users, tokens=tokens)
    stop_server(server)


def folder(path: Path, files: int = 3) -> Path:
    path.mkdir(parents=True)
    for index in range(files):
        (path / f"part-{index}.txt").write_text(f"{path.name} {index}\n")
    return path


def audited(team: Team, *steps: tuple[str, str, int]) -> None:
    """Each (method, route, status) is in the audit log: every step of sharing is recorded."""
    with team.server.client() as admin:
        events = admin.audit(route="/datasets", limit=500).events
    logged = {(event.method, event.route, event.status) for event in events}
    for step in steps:
        assert step in logged, f"{step} not in the audit log"


def refused(result, says: str) -> None:
    assert result.returncode != 0, result.stdout
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_share_and_unshare_decide_who_pulls(team: Team, tmp_path: Path) -> None:
    name = unique("shared")
    dataset = f"{team.a}/{name}"
    team.as_("alice").cli("datasets", "push", dataset, str(folder(tmp_path / "data")), check=True)
    refused(team.as_("bob").cli("datasets", "pull", dataset, str(tmp_path / "bob")), "does not exist")
    refused(team.as_("vic").cli("datasets", "share", dataset, "--project", team.b), "may not share")

    grant = team.as_("alice").cli_json("datasets", "share", dataset, "--project", team.b)
    assert (grant["project"], grant["granted_by"]) == (team.b, team.users["alice"])
    team.as_("bob").cli("datasets", "pull", dataset, str(tmp_path / "bob"), check=True)
    assert sorted(path.name for path in (tmp_path / "bob").iterdir()) == ["part-0.txt", "part-1.txt", "part-2.txt"]
    listed = {item["name"]: item for item in team.as_("bob").cli_json("datasets", "ls")}
    assert listed[name]["readable"] is True
    refused(team.as_("bob").cli("datasets", "share", dataset, "--project", team.c), "may not share")
    refused(team.as_("carol").cli("datasets", "pull", dataset, str(tmp_path / "carol")), "does not exist")
    assert [item["project"] for item in team.as_("vic").cli_json("datasets", "share", dataset)] == [team.b]

    team.as_("mallory").cli("datasets", "unshare", dataset, "--project", team.b, check=True)
    refused(team.as_("bob").cli("datasets", "pull", dataset, str(tmp_path / "again")), "does not exist")
    refused(team.as_("alice").cli("datasets", "unshare", dataset, "--project", team.b), "is not shared")
    audited(team, ("PUT", "/api/v1/datasets/{project}/{name}/grants/{grantee_project}", 200),
            ("DELETE", "/api/v1/datasets/{project}/{name}/grants/{grantee_project}", 204))


def test_requests_are_granted_or_refused_and_the_requester_sees_the_answer(team: Team, tmp_path: Path) -> None:
    name = unique("asked")
    dataset = f"{team.a}/{name}"
    alice = team.as_("alice")
    alice.cli("datasets", "create", dataset, "--catalog", check=True)
    alice.cli("datasets", "push", dataset, str(folder(tmp_path / "data", 1)), check=True)
    hidden = unique("hidden")
    alice.cli("datasets", "create", f"{team.a}/{hidden}", check=True)
    refused(team.as_("carol").cli("datasets", "request", f"{team.a}/{hidden}"), "does not exist")
    refused(team.as_("bob").cli("datasets", "request", dataset, "--project", team.b), "member role")
    refused(team.as_("carol").cli("datasets", "pull", dataset, str(tmp_path / "early")), "ask for access")

    asked = team.as_("carol").cli_json("datasets", "request", dataset, "-m", "for a baseline")
    assert (asked["project"], asked["status"]) == (team.c, "pending"), "her only project, by default"
    again = team.as_("carol").cli_json("datasets", "request", dataset, "--project", team.c)
    assert again["id"] == asked["id"], "a pending request is not made twice"
    refused(team.as_("vic").cli("datasets", "requests", dataset), "may not see the requests")
    refused(team.as_("carol").cli("datasets", "grant", dataset, str(asked["id"])), "may not answer")
    pending = team.as_("alice").cli_json("datasets", "requests")
    assert [item["id"] for item in pending if item["dataset"] == name] == [asked["id"]]
    assert [item["id"] for item in team.as_("mallory").cli_json("datasets", "requests", dataset)] == [asked["id"]]
    assert team.as_("vic").cli_json("datasets", "requests") == [], "viewers answer for nothing"

    granted = team.as_("alice").cli_json("datasets", "grant", dataset, str(asked["id"]))
    assert (granted["status"], granted["answered_by"]) == ("granted", team.users["alice"])
    mine = {item["id"]: item for item in team.as_("carol").cli_json("datasets", "requests", "--mine")}
    assert mine[asked["id"]]["status"] == "granted"
    team.as_("carol").cli("datasets", "pull", dataset, str(tmp_path / "carol"), check=True)
    refused(team.as_("alice").cli("datasets", "refuse", dataset, str(asked["id"])), "was granted")

    with team.as_("admin").client() as admin:
        admin.set_member(team.b, team.users["bob"], "member")
    try:
        second = team.as_("bob").cli_json("datasets", "request", dataset, "--project", team.b)
        answer = team.as_("mallory").cli_json("datasets", "refuse", dataset, str(second["id"]), "-m", "not yet")
        assert (answer["status"], answer["answer"]) == ("refused", "not yet")
        seen = {item["id"]: item for item in team.as_("bob").cli_json("datasets", "requests", "--mine")}
        assert (seen[second["id"]]["status"], seen[second["id"]]["answer"]) == ("refused", "not yet")
        table = team.as_("bob").cli("datasets", "requests", "--mine", check=True).stdout
        assert "refused" in table and "not yet" in table
        refused(team.as_("bob").cli("datasets", "pull", dataset, str(tmp_path / "bob")), "ask for access")
        audited(team, ("POST", "/api/v1/datasets/{project}/{name}/requests/{request_id}/grant", 200),
                ("POST", "/api/v1/datasets/{project}/{name}/requests/{request_id}/refuse", 200))
    finally:
        with team.as_("admin").client() as admin:
            admin.set_member(team.b, team.users["bob"], "viewer")


def test_register_under_a_root_and_nothing_that_leads_out(team: Team, tmp_path: Path) -> None:
    data = folder(team.roots / unique("images"), 2)
    (data / "sub").mkdir()
    (data / "sub" / "deep.txt").write_text("deep\n")
    (data / "inner-link.txt").symlink_to(data / "part-0.txt")
    name = unique("registered")
    made = team.server.cli_json("datasets", "register", str(data), "--name", name)
    assert (made["owner"], made["project"], made["visibility"]) == (None, "default", "catalog")
    version = team.server.cli_json("datasets", "show", f"default/{name}:v1")
    assert version["file_count"] == 4

    outside = folder(tmp_path / "outside", 1)
    refused(team.server.cli("datasets", "register", str(outside), "--name", unique("out")), "not under the data roots")
    leaking = folder(team.roots / unique("leaking"), 1)
    (leaking / "secret").symlink_to(outside / "part-0.txt")
    refused(team.server.cli("datasets", "register", str(leaking), "--name", unique("leak")), "leads outside")
    looping = folder(team.roots / unique("looping"), 1)
    (looping / "up").symlink_to(team.roots)
    refused(team.server.cli("datasets", "register", str(looping), "--name", unique("loop")), "links to folders")
    piped = folder(team.roots / unique("piped"), 1)
    os.mkfifo(piped / "pipe")
    refused(team.server.cli("datasets", "register", str(piped), "--name", unique("pipe")), "not a regular file")
    refused(team.server.cli("datasets", "register", f"{team.roots}/../outside", "--name", unique("dots")), "'..'")
    refused(team.as_("mallory").cli("datasets", "register", str(data), "--name", unique("mine")),
            "not an administrator")
    full = unique("full")  # a project whose storage limit no data fits: refused once its files are stored
    team.server.cli("projects", "add", full, check=True)
    team.server.cli("projects", "set", full, "--storage", "10", check=True)
    big = folder(team.roots / unique("big"), 2)
    refused(team.server.cli("datasets", "register", str(big), "--name", unique("big"), "--project", full),
            "storage limit")
    for stored in big.iterdir():
        digest = hashlib.sha256(stored.read_bytes()).hexdigest()
        assert not (team.server.home / "blobs" / digest[:2] / digest).exists(), "a refused registration keeps nothing"
    names = {item["name"] for item in team.server.cli_json("datasets", "ls")}
    assert not any(item.startswith(("out-", "leak-", "loop-", "pipe-", "dots-", "mine-", "big-")) for item in names)


def test_a_server_without_data_roots_registers_nothing(tmp_path: Path) -> None:
    from mlyard.errors import InvalidRequest
    from mlyard.server.services.datasets import registration

    with pytest.raises(InvalidRequest, match="MLYARD_DATA_ROOTS") as caught:
        registration.check_directory(str(folder(tmp_path / "data", 1)), [])
    assert caught.value.field == "path"


def test_claim_transfer_and_the_audit_log(team: Team) -> None:
    name = unique("unowned")
    team.server.cli("datasets", "register", str(folder(team.roots / name, 1)), "--name", name, check=True)
    refused(team.as_("bob").cli("datasets", "claim", f"default/{name}", "--project", team.b), "member role")
    asked = team.as_("carol").cli_json("datasets", "claim", f"default/{name}", "--project", team.c)
    assert (asked["kind"], asked["status"], asked["to_user"]) == ("claim", "pending", team.users["carol"])
    refused(team.as_("mallory").cli("datasets", "approve-claim", str(asked["id"])), "needs an administrator")
    assert asked["id"] in [item["id"] for item in team.server.cli_json("datasets", "claims")]
    approved = team.server.cli_json("datasets", "approve-claim", str(asked["id"]))
    assert (approved["status"], approved["dataset_project"]) == ("approved", team.c)
    card = team.as_("carol").cli_json("datasets", "show", f"{team.c}/{name}")
    assert (card["owner"], card["versions"]) == (team.users["carol"], 1)
    mine = {item["id"]: item for item in team.as_("carol").cli_json("datasets", "claims", "--mine")}
    assert mine[asked["id"]]["status"] == "approved"

    refused(team.as_("alice").cli("datasets", "transfer", f"{team.c}/{name}", "--to-project", team.a),
            "may not transfer")
    moving = team.as_("carol").cli_json("datasets", "transfer", f"{team.c}/{name}", "--to-project", team.a,
                                        "--to-user", team.users["alice"])
    assert (moving["kind"], moving["to_user"]) == ("transfer", team.users["alice"])
    refused(team.as_("alice").cli("datasets", "approve-claim", str(moving["id"])), "maintainer of project")
    assert [item["id"] for item in team.as_("mallory").cli_json("datasets", "claims")] == [moving["id"]]
    team.as_("mallory").cli("datasets", "approve-claim", str(moving["id"]), check=True)
    card = team.as_("alice").cli_json("datasets", "show", f"{team.a}/{name}")
    assert card["owner"] == team.users["alice"]

    audited(team, ("POST", "/api/v1/datasets:register", 201),
            ("POST", "/api/v1/datasets/{project}/{name}/claims", 201),
            ("POST", "/api/v1/datasets/claims/{claim_id}/approve", 200),
            ("POST", "/api/v1/datasets/{project}/{name}/transfers", 201))
    with team.server.client() as admin:
        events = admin.audit(route="/datasets", limit=500).events
    approvals = [event for event in events if event.route.endswith("/approve") and event.status == 200]
    assert {event.target for event in approvals} >= {f"/api/v1/datasets/claims/{asked['id']}/approve",
                                                      f"/api/v1/datasets/claims/{moving['id']}/approve"}
