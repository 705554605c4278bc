"""Replicas reach the API with MLYARD_API and a token scoped to their job, revoked at its end."""

from __future__ import annotations

import json
import re

import httpx
from conftest import RunningServer

PROBE = """
import json, os, httpx
api, token, me = os.environ["MLYARD_API"], os.environ["MLYARD_TOKEN"], os.environ["MLYARD_JOB_ID"]
headers = {"Authorization": f"Bearer {token}"}
answers = {
    "own": httpx.get(f"{api}/api/v1/jobs/{me}", headers=headers).status_code,
    "other": httpx.get(f"{api}/api/v1/jobs/{int(me) - 1}", headers=headers).status_code,
    "submit": httpx.post(f"{api}/api/v1/jobs", headers=headers, json={"name": "x", "command": ["true"]}).status_code,
}
print("TOKEN " + json.dumps({"answers": answers, "token": token}))
"""


def test_a_job_token_reads_its_own_job_only_and_dies_with_it(server: RunningServer) -> None:
    first = server.cli_json("run", "--no-code", "--name", "before", "--", "true")
    job = server.cli_json("run", "--no-code", "--name", "probe", "--", "python", "-c", PROBE)
    assert job["id"] > first["id"]
    assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
    line = re.search(r"^TOKEN (.*)$", server.cli("logs", str(job["id"]), check=True).stdout, re.MULTILINE).group(1)
    report = json.loads(line)
    assert report["answers"] == {"own": 200, "other": 403, "submit": 403}

    response = httpx.get(f"{server.url}/api/v1/jobs/{job['id']}",
                         headers={"Authorization": f"Bearer {report['token']}"})
    assert response.status_code == 401, "the token was revoked when the job ended"
