"""Project volumes through the real server and CLI: shared by the replicas of a job, measured,
held to their quota at mount (with an event for a running job that writes past it), counted in
the project's storage, removed only once no unfinished job mounts them; who may do what."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer, wait_until
from test_projects import as_user, log_in, person
from web_login import web_session

pytestmark = pytest.mark.slow

# Each rank writes a file, then waits to see its peer's: the two replicas see one directory.
PAIR = """
import os, pathlib, sys, time
shared = pathlib.Path(os.environ["MLYARD_VOLUME_SCRATCH"])
assert pathlib.Path("volumes/scratch").resolve() == shared.resolve()
(shared / f"rank-{os.environ['RANK']}").write_bytes(os.urandom(int(sys.argv[1])))
deadline = time.time() + 60
while len(list(shared.glob("rank-*"))) < 2:
    assert time.time() < deadline, "the other replica's file never showed"
    time.sleep(0.1)
print("SEEN", sorted(path.name for path in shared.glob("rank-*")))
"""
FILL = ("import os, time; open(os.environ['MLYARD_VOLUME_SCRATCH'] + '/big', 'wb').write(os.urandom(50_000)); "
        "time.sleep(300)")


def show(server: RunningServer, project: str, name: str = "scratch") -> dict:
    return server.cli_json("volumes", "show", f"{project}/{name}")


def run(server: RunningServer, project: str, *command: str, replicas: int = 1, path: str | None = None):
    volume = {"name": "scratch", **({"path": path} if path else {})}
    return server.cli("run", "--no-code", "--replicas", str(replicas), "--set", f"project={project}",
                      "--set", f"volumes={json.dumps([volume])}", "--output", "json", "--", *command)


def test_a_volume_is_shared_by_a_jobs_replicas_measured_and_held_to_its_quota(server: RunningServer) -> None:
    project = f"vol-{server.port}"
    server.cli("projects", "add", project, check=True)
    made = server.cli_json("volumes", "create", "scratch", "--size", "64Ki", "--project", project)
    assert made["size_bytes"] == 65536 and made["enforcement"] is None and made["used_bytes"] is None
    [listed] = [volume for volume in server.cli_json("volumes", "ls") if volume["project"] == project]
    assert listed["name"] == "scratch"
    again = server.cli("volumes", "create", "scratch", "--size", "1Mi", "--project", project)
    assert again.returncode == 1 and "exists" in again.stderr and "Traceback" not in again.stderr

    pair = json.loads(run(server, project, "python", "-c", PAIR, "20000", replicas=2).stdout)["id"]
    done = wait_until(lambda: (job := server.cli_json("show", str(pair)))["status"] in ("SUCCEEDED", "FAILED") and job,
                      120, "the pair finished")
    log = server.cli("logs", str(pair)).stdout
    assert done["status"] == "SUCCEEDED", (done["message"], log)
    assert "SEEN ['rank-0', 'rank-1']" in log, log
    measured = wait_until(lambda: (volume := show(server, project))["used_bytes"] == 40000 and volume, 30,
                          "both files measured")
    assert not measured["over_quota"] and measured["mounted_by"] == []

    filler = json.loads(run(server, project, "python", "-c", FILL).stdout)["id"]
    over = wait_until(lambda: (volume := show(server, project))["over_quota"] and volume, 60, "the volume over quota")
    assert over["used_bytes"] == 90000 and over["mounted_by"] == [filler]
    event = wait_until(lambda: [event["message"] for event in server.cli_json("show", str(filler))["events"]
                                if "over its quota" in (event["message"] or "")], 30, "the running job told")
    assert event == [f"volume {project}/scratch holds 87.9 KiB, over its quota of 64.0 KiB; new jobs cannot mount "
                     "it until files are removed"]
    assert "OVER QUOTA" in server.cli("volumes", "ls", "--project", project, check=True).stdout
    with httpx.Client(base_url=server.url) as browser:
        web_session(browser, server.token())
        job_page = browser.get(f"/jobs/{filler}").text
    assert f'href="/volumes?project={project}">{project}/scratch</a>' in job_page
    assert "<code>volumes/scratch</code>" in job_page

    refused = run(server, project, "true")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "over its quota" in refused.stderr and "cannot mount it" in refused.stderr, refused.stderr
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token()}"}) as http:
        answer = http.post("/api/v1/jobs", json={"name": "late", "command": ["true"], "project": project,
                                                 "volumes": [{"name": "scratch"}]})
    assert answer.status_code == 422 and answer.json()["details"][0]["field"] == "volumes.0.name", answer.text
    busy = server.cli("volumes", "rm", f"{project}/scratch")
    assert busy.returncode == 1 and f"mounted by unfinished jobs ({filler})" in busy.stderr, busy.stderr

    storage = server.cli_json("projects", "storage", project)
    assert storage["volumes_bytes"] == 65536 and storage["used_bytes"] == 65536
    assert storage["volumes"] == [{"name": "scratch", "size_bytes": 65536, "used_bytes": 90000}]
    server.cli("projects", "set", project, "--storage", "100Ki", check=True)
    full = server.cli("volumes", "create", "more", "--size", "64Ki", "--project", project)
    assert full.returncode == 1 and "storage limit" in full.stderr, full.stderr

    server.cli("cancel", str(filler), check=True)
    wait_until(lambda: server.cli_json("show", str(filler))["status"] == "CANCELLED", 60, "the filler cancelled")
    claims = {path.name for path in (server.home / "volumes").iterdir()}
    server.cli("volumes", "rm", f"{project}/scratch", check=True)
    assert len({path.name for path in (server.home / "volumes").iterdir()}) == len(claims) - 1, "its files are gone"
    assert server.cli("volumes", "show", f"{project}/scratch").returncode == 1
    assert server.cli_json("projects", "storage", project)["volumes_bytes"] == 0


def test_a_process_job_cannot_mount_at_an_absolute_path_and_roles_decide_who_does_what(
        server: RunningServer, tmp_path: Path) -> None:
    project, other = f"volr-{server.port}", f"volo-{server.port}"
    server.cli("projects", "add", project, check=True)
    server.cli("projects", "add", other, check=True)
    server.cli_json("volumes", "create", "scratch", "--size", "1Mi", "--project", project)

    absolute = json.loads(run(server, project, "true", path="/scratch").stdout)["id"]
    failed = wait_until(lambda: (job := server.cli_json("show", str(absolute)))["status"] == "FAILED" and job, 60,
                        "the job refused at its start")
    assert "only a container can have" in failed["message"], failed["message"]
    system = run(server, project, "true", path="/etc/cron.d")
    assert system.returncode == 2 and "volumes.0.path" in system.stderr, system.stderr

    names = {role: f"v{role[:3]}-{server.port}" for role in ("viewer", "member", "outsider")}
    people = {role: person(server, names[role], tmp_path, {project: role} if role != "outsider" else {other: "member"})
              for role in names}
    for role, env in people.items():
        log_in(server, env, names[role])
    viewer, member, outsider = people["viewer"], people["member"], people["outsider"]
    assert as_user(server, viewer, "volumes", "show", f"{project}/scratch").returncode == 0
    denied = as_user(server, viewer, "volumes", "create", "mine", "--size", "1Mi", "--project", project)
    assert denied.returncode == 1 and "member role" in denied.stderr, denied.stderr
    hidden = as_user(server, outsider, "volumes", "show", f"{project}/scratch")
    assert hidden.returncode == 1 and "does not exist" in hidden.stderr
    assert project not in as_user(server, outsider, "volumes", "ls").stdout
    foreign = as_user(server, outsider, "run", "--no-code", "--set", f"project={other}", "--set",
                      f'volumes=[{{"name": "scratch", "project": "{project}"}}]', "--", "true")
    assert foreign.returncode == 1 and "does not exist" in foreign.stderr, foreign.stderr

    made = as_user(server, member, "volumes", "create", "mine", "--size", "1Mi", "--project", project)
    assert made.returncode == 0, made.stderr
    assert as_user(server, member, "volumes", "rm", f"{project}/scratch").returncode == 1, "made by another"
    assert as_user(server, member, "volumes", "rm", f"{project}/mine").returncode == 0
    server.cli("volumes", "rm", f"{project}/scratch", check=True)
