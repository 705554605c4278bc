"""A job's `env` values are shown only to its owner, its project's maintainers and
administrators; `env_secrets` are shown to nobody, stored encrypted, and reach only the
replicas. Checked through the API, the CLI, the web pages, the audit log, the server's log and
the database file of a real server."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from conftest import MLYARD, REPOSITORY, RunningServer, start_server, stop_server, wait_until

from mlyard.backends.base import AttemptLaunch, ReplicaLaunch
from mlyard.backends.kubernetes.objects import render_attempt
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.server.control.launches import open_secrets
from mlyard.server.job_secrets import box_at
from mlyard.spec import JobSpec

PASSWORD = "secrets pass 1"
PROJECT = "lab"
PLAIN = f"wandb-{uuid.uuid4().hex}"
SECRET = f"s3cret-{uuid.uuid4().hex}"
PRINT_HASH = ("import hashlib, os; print('hash', hashlib.sha256(os.environ['TRAIN_TOKEN'].encode()).hexdigest())")


class Person:
    def __init__(self, server: RunningServer, name: str, role: str, config: Path) -> None:
        self.server, self.name = server, name
        server.cli("users", "add", name, "--password-stdin", input=f"{PASSWORD}\n", check=True)
        server.cli("projects", "add-member", PROJECT, name, "--role", role, check=True)
        self.env = {key: value for key, value in server.env.items() if key != "MLYARD_HOME"}
        self.env.update(MLYARD_CONFIG_DIR=str(config / name), MLYARD_URL=server.url)
        assert self.cli("login", "--user", name, "--password-stdin", input=f"{PASSWORD}\n").returncode == 0

    def cli(self, *arguments: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([MLYARD, *arguments], cwd=REPOSITORY, env={**self.env, **env}, capture_output=True,
                              text=True, timeout=120, input=input, check=False)

    def json(self, *arguments: str) -> dict | list:
        at = arguments.index("--") if "--" in arguments else len(arguments)
        result = self.cli(*arguments[:at], "--output", "json", *arguments[at:])
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def browser(self) -> httpx.Client:
        client = httpx.Client(base_url=self.server.url, timeout=10, headers={"Origin": self.server.url})
        form = client.get("/login").text
        fields = {"user": self.name, "password": PASSWORD, "next": "/jobs"}
        if (match := re.search(r'name="login_csrf" value="([^"]*)"', form)) is not None:
            fields["login_csrf"] = match.group(1)
        assert client.post("/login", data=fields).status_code == 303
        return client


def resubmit_on_web(browser: httpx.Client, job_id: int) -> httpx.Response:
    page = browser.get(f"/jobs/{job_id}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    return browser.post(f"/jobs/{job_id}/resubmit", data={"csrf": csrf, "key": uuid.uuid4().hex})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    home = tmp_path_factory.mktemp("env-secrets")
    server = start_server(home)
    server.cli("projects", "add", PROJECT, check=True)
    config = tmp_path_factory.mktemp("env-secrets-cli")
    people = {name: Person(server, name, role, config)
              for name, role in (("olive", "member"), ("vic", "viewer"), ("mia", "member"))}
    yield {"server": server, **people}
    stop_server(server)


def finished(person: Person, job_id: int) -> dict:
    return wait_until(lambda: (job := person.json("show", str(job_id)))["status"] in ("SUCCEEDED", "FAILED") and job,
                      timeout=60, what=f"job {job_id} to end")


def test_env_values_are_masked_for_who_may_not_read_them(world: dict) -> None:
    olive, vic, mia, server = world["olive"], world["vic"], world["mia"], world["server"]
    job = olive.json("run", "--no-code", "--name", "plain", "--set", f"project={PROJECT}",
                     "--set", f"env.WANDB_API_KEY={PLAIN}", "--", "true")
    assert job["spec"]["env"] == {"WANDB_API_KEY": PLAIN}  # its owner
    assert server.cli_json("show", str(job["id"]))["spec"]["env"] == {"WANDB_API_KEY": PLAIN}  # an administrator

    for answer in (vic.cli("show", str(job["id"]), "--output", "json"), vic.cli("jobs", "--all", "--output", "json"),
                   mia.cli("show", str(job["id"]), "--output", "json")):
        assert answer.returncode == 0 and '"WANDB_API_KEY": "***"' in answer.stdout and PLAIN not in answer.stdout
    with closing(vic.browser()) as browser:
        page = browser.get(f"/jobs/{job['id']}").text
        assert "WANDB_API_KEY" in page and "***" in page and PLAIN not in page
        assert PLAIN not in browser.get(f"/submit?from={job['id']}").text

    # Another member may not submit it again: the values are not theirs to see, nor "***" values.
    with closing(mia.browser()) as browser:
        refused = resubmit_on_web(browser, job["id"])
        assert refused.status_code == 403 and "hidden from you" in refused.text
    masked = mia.json("show", str(job["id"]))["spec"]
    copied = Path(mia.env["MLYARD_CONFIG_DIR"]) / "copied.json"
    copied.write_text(json.dumps({key: value for key, value in masked.items() if key != "snapshot"}))
    attempt = mia.cli("submit", str(copied), "--no-code")
    assert attempt.returncode == 1 and "env.WANDB_API_KEY" in attempt.stderr and "hidden value" in attempt.stderr

    # Its owner may, and the new job keeps the value.
    with closing(olive.browser()) as browser:
        again = resubmit_on_web(browser, job["id"])
        assert again.status_code == 303, again.text
    new_id = int(re.search(r"/jobs/(\d+)", again.headers["location"]).group(1))
    assert olive.json("show", str(new_id))["spec"]["env"] == {"WANDB_API_KEY": PLAIN}


@pytest.mark.slow
def test_env_secrets_reach_the_replica_and_nowhere_else(world: dict) -> None:
    olive, mia, server = world["olive"], world["mia"], world["server"]
    submitted = olive.cli("run", "--no-code", "--name", "secretive", "--set", f"project={PROJECT}",
                          "--secret-env", "TRAIN_TOKEN", "--output", "json", "--", "python", "-c", PRINT_HASH,
                          TRAIN_TOKEN=SECRET)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["spec"]["env_secrets"] == {"TRAIN_TOKEN": "(secret)"}
    assert finished(olive, job["id"])["status"] == "SUCCEEDED"
    expected = f"hash {hashlib.sha256(SECRET.encode()).hexdigest()}"
    assert expected in olive.cli("logs", str(job["id"])).stdout

    # Its owner submits it again from the web page: the new job gets the same secret.
    with closing(olive.browser()) as browser:
        again = resubmit_on_web(browser, job["id"])
        assert again.status_code == 303, again.text
        new_id = int(re.search(r"/jobs/(\d+)", again.headers["location"]).group(1))
        assert finished(olive, new_id)["status"] == "SUCCEEDED"
        pages = [browser.get(f"/jobs/{job_id}").text for job_id in (job["id"], new_id)]
        pages.append(browser.get(f"/submit?from={job['id']}").text)
    assert expected in olive.cli("logs", str(new_id)).stdout
    assert all("(secret)" in page for page in pages[:2])
    # Nobody else may: the secret would run in a job of theirs.
    with closing(mia.browser()) as browser:
        refused = resubmit_on_web(browser, job["id"])
        assert refused.status_code == 403 and "env_secrets" in refused.text

    seen = [submitted.stdout, *pages, olive.cli("show", str(job["id"]), "--output", "json").stdout,
            server.cli("show", str(job["id"]), "--output", "json").stdout,
            server.cli("jobs", "--all", "--output", "json").stdout, server.cli("audit", "--output", "json").stdout]
    assert all(SECRET not in text for text in seen)
    files = [path for path in server.home.iterdir() if path.name.startswith(("mlyard.db", "server.log"))]
    assert any(path.name == "mlyard.db" for path in files)
    assert all(SECRET.encode() not in path.read_bytes() for path in files)
    assert (server.home / "secret.key").stat().st_mode & 0o777 == 0o600


def test_secrets_sealed_with_another_key_are_refused_clearly(tmp_path: Path) -> None:
    sealed = box_at(tmp_path / "one.key").seal({"TRAIN_TOKEN": SECRET})
    spec = JobSpec(name="sealed", command=["true"], env_secrets=sealed)
    assert open_secrets(spec, tmp_path / "one.key") == ({"TRAIN_TOKEN": SECRET}, None)
    opened, problem = open_secrets(spec, tmp_path / "other.key")
    assert opened == {} and "MLYARD_SECRET_KEY_FILE" in problem and SECRET not in problem
    assert (tmp_path / "other.key").stat().st_mode & 0o777 == 0o600


def test_kubernetes_pods_take_secrets_from_the_secret_object(tmp_path: Path) -> None:
    settings = KubernetesSettings(shared_mount_path=str(tmp_path))
    replica = ReplicaLaunch(replica_id=1, name="worker-0", rank=0, node="n", cpu_ids=(), gpu_ids=(), memory_bytes=1,
                            command=("true",), env={"TRAIN_TOKEN": SECRET, "MLYARD_TOKEN": "t", "A": "1"},
                            directory=tmp_path / "r", snapshot=None, secret_names=frozenset({"TRAIN_TOKEN"}))
    _, secret, pod = render_attempt(AttemptLaunch(job_id=1, attempt=1, replicas=(replica,)), settings)
    assert secret["stringData"]["env-TRAIN_TOKEN"] == SECRET
    assert SECRET not in json.dumps(pod)
    variables = {variable["name"]: variable for variable in pod["spec"]["containers"][0]["env"]}
    assert variables["TRAIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "env-TRAIN_TOKEN"
    assert variables["A"]["value"] == "1"
