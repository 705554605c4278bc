"""Environment builds: a requirements text names packages and nothing else (no file read, no URL
fetched, no local code run), pip takes its index and options from the administrator alone, its
processes see none of the server's variables, and only a project's maintainers build."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server
from pydantic import ValidationError
from security_support import FileCanary, HttpCanary, plant_file_canary

from mlyard.api.environments import EnvironmentRequest
from mlyard.environments import containerfile
from mlyard.environments.build_policy import BuildPolicy
from mlyard.environments.image import ImageBuilder
from mlyard.environments.virtualenv import BuildFailed, VirtualenvBuilder, _escaping_links, _write_new
from mlyard.errors import MlyardError
from mlyard.runtime import hide_home
from mlyard.server.workers import build_account

PASSWORD = "env builds pass 1"


def hostile_lines(canary: FileCanary, url: str) -> list[str]:
    return [f"-r {canary.path}", f"--requirement={canary.path}", f"-c {canary.path}", "-e .",
            f"--index-url {url}/simple", f"-i {url}/simple", f"--extra-index-url {url}/simple",
            f"--find-links {url}/", f"-f {url}/", "--trusted-host 127.0.0.1", "--pre",
            f"tinyenvpkg @ {url}/x.whl", f"{url}/x.whl", f"file://{canary.path.parent}/x.whl",
            "./local-package", f"{canary.path.parent}/pkg", "../pkg", "${HOME}/pkg", "numpy==${VERSION}",
            "numpy==2.1 --hash=sha256:00", "numpy \\"]


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> FileCanary:
    return plant_file_canary(tmp_path_factory.mktemp("outside-home"))


@pytest.fixture(scope="module")
def listener() -> Iterator[HttpCanary]:
    with HttpCanary() as running:
        yield running


def test_every_option_path_url_and_variable_is_refused_with_its_line(canary: FileCanary,
                                                                        listener: HttpCanary) -> None:
    for line in hostile_lines(canary, listener.url):
        with pytest.raises(ValidationError) as raised:
            EnvironmentRequest(name="x", base="busybox", requirements=f"# pinned\n\nnumpy==2.1\n{line}\n")
        (error,) = raised.value.errors()
        assert error["loc"] == ("requirements",), line
        assert "line 4:" in error["msg"] and "not a package requirement (PEP 508)" in error["msg"], error["msg"]
        canary.assert_not_in(error["msg"])
    listener.assert_untouched()


def test_package_names_versions_extras_and_markers_pass_in_a_canonical_form() -> None:
    request = EnvironmentRequest(name="x", base="busybox", requirements=(
        "# a comment\n  torch[cuda] >=2.1,<3   # inline\n\nnumpy==2.1; python_version >= '3.11'\n"))
    assert request.requirements == 'torch[cuda]<3,>=2.1\nnumpy==2.1; python_version >= "3.11"'
    with pytest.raises(ValidationError, match="at most 1000"):
        EnvironmentRequest(name="x", base="busybox", requirements="numpy\n" * 1001)


def test_pip_options_come_from_the_administrator_and_forbid_source_builds_by_default() -> None:
    default = BuildPolicy().pip_options()
    assert default[-2:] == ["--only-binary", ":all:"] and "--isolated" in default
    policy = BuildPolicy.from_environment({
        "MLYARD_PIP_INDEX_URL": "https://pypi.lab/simple", "MLYARD_PIP_EXTRA_INDEX_URLS": "https://a/s https://b/s",
        "MLYARD_PIP_TRUSTED_HOSTS": "pypi.lab", "MLYARD_PIP_ALLOW_SOURCE": "on"})
    options = policy.pip_options()
    assert ["--index-url", "https://pypi.lab/simple"] == options[options.index("--index-url"):][:2]
    assert options.count("--extra-index-url") == 2 and "--trusted-host" in options
    assert "--only-binary" not in options
    for variable, value in [("MLYARD_PIP_INDEX_URL", "https://x/s --trusted-host y"),
                            ("MLYARD_PIP_INDEX_URL", "ftp://x"), ("MLYARD_PIP_TRUSTED_HOSTS", "-x"),
                            ("MLYARD_ENVIRONMENT_BASES", "python$(id)"), ("MLYARD_BUILD_USER", "root")]:
        with pytest.raises(MlyardError, match=variable):
            BuildPolicy.from_environment({variable: value})


def test_the_containerfile_takes_no_option_or_instruction_from_the_request() -> None:
    request = EnvironmentRequest(name="x", base="python:3.12-slim", requirements="numpy", apt=["libgl1"])
    text = containerfile(request, "abc", BuildPolicy(index_url="https://pypi.lab/simple").pip_options())
    assert "--no-install-recommends -- libgl1" in text and '"--only-binary", ":all:"' in text
    assert len(text.splitlines()) == 6
    for bad in ({"apt": ["-oAPT::Update::Pre-Invoke::=id"]}, {"apt": ["x\nRUN id"]}, {"base": "busybox\nRUN id"},
                {"base": "--platform=x busybox"}):
        with pytest.raises(ValidationError):
            EnvironmentRequest(**{"name": "x", "base": "busybox", **bad})
    assert BuildPolicy(bases=("registry.lab/",)).base_problem("python:3.12") is not None
    assert BuildPolicy(bases=("registry.lab/",)).base_problem("registry.lab/python:3.12") is None


@pytest.mark.slow
def test_build_processes_see_none_of_the_servers_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's Python here prints its environment first, so the build log shows what pip would see."""
    monkeypatch.setenv("MLYARD_DATABASE_URL", "postgresql://mlyard:SECRET-PASSWORD@db/mlyard")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nenv\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    lines: list[str] = []
    built = VirtualenvBuilder(tmp_path / "envs", python=str(python)).build(
        EnvironmentRequest(name="x", base="busybox"), "h1", lines.append)
    log = "\n".join(lines)
    assert Path(built, "bin", "python").exists()
    assert "PATH=" in log and "SECRET-PASSWORD" not in log and "MLYARD_" not in log and "PIP_INDEX_URL" not in log


def test_index_credentials_never_reach_the_log_a_message_or_an_image(tmp_path: Path) -> None:
    secret = "https://lab:S3CRET-TOKEN@pypi.lab/simple"
    builder = VirtualenvBuilder(tmp_path / "envs", policy=BuildPolicy(index_url=secret))
    lines: list[str] = []
    with pytest.raises(BuildFailed) as raised:
        builder._run(["/bin/false", "--index-url", secret, "--extra-index-url", secret], lines.append, None,
                     tmp_path, tmp_path)
    assert lines == ["$ /bin/false --index-url https://****@pypi.lab/simple --extra-index-url "
                     "https://****@pypi.lab/simple"]
    assert "S3CRET" not in str(raised.value) and "****@pypi.lab" in str(raised.value)
    with pytest.raises(MlyardError) as refused:
        BuildPolicy.from_environment({"MLYARD_PIP_INDEX_URL": "https://lab:S3CRET-TOKEN@pypi.lab/<x>"})
    assert "S3CRET" not in str(refused.value)
    assert BuildPolicy(extra_index_urls=(secret,)).has_credentials()
    assert not BuildPolicy(index_url="https://pypi.lab/simple/a@b").has_credentials()
    image = ImageBuilder(client=None, policy=BuildPolicy(index_url=secret))
    image.exists = lambda content_hash: False  # type: ignore[method-assign]
    with pytest.raises(BuildFailed, match="holds credentials"):
        image.build(EnvironmentRequest(name="x", base="busybox", requirements="numpy"), "h1", print)


def test_root_writes_no_link_the_build_left(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("the server's file\n")
    target = tmp_path / "envs" / "h1"
    target.mkdir(parents=True)
    (target / "bin").mkdir()
    (target / "bin" / "python").symlink_to(sys.executable)
    (target / "lib64").symlink_to("lib")
    assert _escaping_links(target) == []
    (target / "lib" / "x").mkdir(parents=True)
    (target / "lib" / "x" / "etc").symlink_to("/etc")
    assert _escaping_links(target) == ["lib/x/etc -> /etc"]
    marker = target / VirtualenvBuilder.COMPLETE
    marker.symlink_to(victim)
    assert not VirtualenvBuilder(tmp_path / "envs").exists("h1"), "a linked marker is no marker"
    _write_new(marker, "h1\n")
    assert victim.read_text() == "the server's file\n" and not marker.is_symlink() and marker.read_text() == "h1\n"


@pytest.mark.slow
def test_a_build_on_the_servers_account_sees_of_mlyard_home_only_its_virtualenv(tmp_path: Path) -> None:
    """The build's Python tries to read admin.token and to plant a linked marker before pip runs."""
    if hide_home.probe() is not None:
        pytest.skip(f"namespaces cannot be made here: {hide_home.probe()}")
    home, victim = tmp_path / "home", tmp_path / "victim"
    home.mkdir()
    (home / "admin.token").write_text("ADMIN-TOKEN-VALUE\n")
    victim.write_text("the server's file\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ncat {home}/admin.token || echo token hidden\n{sys.executable} \"$@\" || exit 1\n"
                      f"ln -s {victim} \"$3/.mlyard-complete\"\n")
    python.chmod(0o755)
    lines: list[str] = []
    built = VirtualenvBuilder(home / "environments", python=str(python), hide=home).build(
        EnvironmentRequest(name="x", base="busybox"), "h1", lines.append)
    log = "\n".join(lines)
    assert "ADMIN-TOKEN-VALUE" not in log and "token hidden" in log, log
    assert Path(built, "bin", "python").exists() and Path(built, VirtualenvBuilder.COMPLETE).read_text() == "h1\n"
    assert victim.read_text() == "the server's file\n"


def test_a_root_server_never_builds_as_root_where_the_build_account_cannot_work(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not build_account.problems(tmp_path / "envs"):
        pytest.skip("needs a root server whose Python other accounts cannot run")
    builder = VirtualenvBuilder(tmp_path / "envs", account=build_account.account_for(BuildPolicy(), tmp_path / "envs"))
    with pytest.raises(BuildFailed, match="MLYARD_BUILD_USER=server") as raised:
        builder.build(EnvironmentRequest(name="x", base="busybox", requirements="numpy"), "h1", print)
    assert "cannot be run by other accounts" in str(raised.value)
    assert not (tmp_path / "envs" / "h1").exists(), "nothing ran"
    assert build_account.account_for(BuildPolicy(build_user="server"), tmp_path / "envs")() is None


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.slow
def test_a_root_server_builds_as_the_build_account_and_keeps_the_result(tmp_path: Path) -> None:
    """With a Python other accounts can run, pip runs as `mlyard_build`, which owns nothing after."""
    if os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("needs root and a system Python")
    shared = Path(tempfile.mkdtemp(prefix="mlyard-build-test-"))
    try:
        shared.chmod(0o755)
        python = shared / "python"
        python.write_text(f"#!/bin/sh\nid -un\nexec {SYSTEM_PYTHON} \"$@\"\n")
        python.chmod(0o755)
        if build_account.problems(shared / "envs", str(python)):
            pytest.skip(f"the build account cannot work here: {build_account.problems(shared / 'envs', str(python))}")
        index = package_index(shared / "index")
        for directory, _, files in os.walk(shared):
            os.chmod(directory, 0o755)
        policy = BuildPolicy(index_url=index.as_uri())
        builder = VirtualenvBuilder(shared / "envs", python=str(python), policy=policy,
                                    account=build_account.account_for(policy, shared / "envs", str(python)))
        lines: list[str] = []
        built = Path(builder.build(EnvironmentRequest(name="x", base="busybox", requirements="tinysecpkg==1.0"),
                                   "h1", lines.append))
        log = "\n".join(lines)
        assert build_account.BUILD_ACCOUNT in lines and "root" not in lines, log
        assert "Successfully installed tinysecpkg-1.0" in log and "--only-binary :all:" in log
        owners = {path.lstat().st_uid for path in [built, *built.rglob("*")]}
        assert owners == {os.geteuid()}, "the build account keeps nothing it could change later"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def package_index(directory: Path) -> Path:
    """A PEP 503 index on disk with one wheel (pip reads `index.html` of a file: URL)."""
    import zipfile

    project = directory / "simple" / "tinysecpkg"
    project.mkdir(parents=True)
    wheel = project / "tinysecpkg-1.0-py3-none-any.whl"
    files = {"tinysecpkg/__init__.py": "", "tinysecpkg-1.0.dist-info/METADATA":
             "Metadata-Version: 2.1\nName: tinysecpkg\nVersion: 1.0\n", "tinysecpkg-1.0.dist-info/WHEEL":
             "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("tinysecpkg-1.0.dist-info/RECORD", "".join(f"{name},,\n" for name in [*files, "RECORD"]))
    (directory / "simple" / "index.html").write_text('<a href="tinysecpkg/">tinysecpkg</a>\n')
    (project / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return directory / "simple"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, listener: HttpCanary) -> Iterator[RunningServer]:
    """PIP_INDEX_URL in the server's own environment points at the canary: pip would use it if
    the server's variables reached a build."""
    index = package_index(tmp_path_factory.mktemp("index"))
    running = start_server(tmp_path_factory.mktemp("mlyard-env-security"), MLYARD_RUNTIME="process",
                           MLYARD_PIP_INDEX_URL=index.as_uri(), MLYARD_BUILD_USER="server",
                           PIP_INDEX_URL=f"{listener.url}/simple", PIP_FIND_LINKS=f"{listener.url}/")
    yield running
    stop_server(running)


def _api(server: RunningServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _wait(http: httpx.Client, name: str) -> dict:
    deadline = time.monotonic() + 120
    while (shown := http.get(f"/environments/{name}").json())["status"] in ("queued", "building"):
        assert time.monotonic() < deadline, shown
        time.sleep(0.3)
    return shown


@pytest.mark.slow
def test_the_server_refuses_hostile_requirements_and_builds_only_from_its_index(
        server: RunningServer, canary: FileCanary, listener: HttpCanary) -> None:
    with _api(server, server.token()) as admin:
        for number, line in enumerate(hostile_lines(canary, listener.url)):
            answer = admin.post("/environments", json={"name": f"bad-{number}", "base": "busybox",
                                                       "requirements": f"numpy\n{line}"})
            assert answer.status_code == 422, (line, answer.text)
            assert answer.json()["details"][0]["field"] == "requirements" and "line 2" in answer.text
            canary.assert_not_in(answer.text)
            assert admin.get(f"/environments/bad-{number}").status_code == 404
        answer = admin.post("/environments", json={"name": "good", "base": "busybox", "requirements": "tinysecpkg==1.0"})
        assert answer.status_code == 202, answer.text
        built = _wait(admin, "good")
    log = "\n".join(built["log_tail"])
    assert built["status"] == "ready", built
    assert "Successfully installed tinysecpkg-1.0" in log or "tinysecpkg" in log
    listener.assert_untouched()


@pytest.mark.slow
def test_only_a_projects_maintainers_build_and_only_its_readers_see(server: RunningServer) -> None:
    with server.client() as admin:
        for project in ("enva", "envb"):
            admin.create_project(project)
        roles = {"maint": ("enva", "maintainer"), "memb": ("enva", "member"), "view": ("envb", "viewer")}
        for user, (project, role) in roles.items():
            admin.create_user(user, password=PASSWORD)
            admin.set_member(project, user, role)
        admin.create_user("nobody", password=PASSWORD)
    with httpx.Client(base_url=f"{server.url}/api/v1") as http:
        tokens = {user: http.post("/login", json={"user": user, "password": PASSWORD}).json()["token"]
                  for user in (*roles, "nobody")}
    wanted = {"name": "env-of-a", "project": "enva", "base": "busybox", "apt": ["curl"]}
    for user in ("memb", "view", "nobody"):
        with _api(server, tokens[user]) as http:
            assert http.post("/environments", json=wanted).status_code == 403, user
            assert http.post("/environments", json={**wanted, "project": "default"}).status_code == 403, user
    with _api(server, tokens["maint"]) as http:
        assert http.post("/environments", json=wanted).status_code == 202
    with _api(server, tokens["memb"]) as http:
        assert http.get("/environments/env-of-a").status_code == 200
        assert http.delete("/environments/env-of-a").status_code == 403
    with _api(server, tokens["view"]) as http:
        assert http.get("/environments/env-of-a").status_code == 404
        assert http.delete("/environments/env-of-a").status_code == 404
        assert "env-of-a" not in http.get("/environments").text
    with _api(server, server.token()) as admin:
        taken = admin.post("/environments", json={**wanted, "project": "envb"})
        assert taken.status_code == 409 and "another project" in taken.text
        job = admin.post("/jobs", json={"name": "uses-good", "project": "envb", "environment": "good",
                                        "command": ["true"], "roles": [{"resources": {"cpu": 1}}]})
        assert job.status_code == 422 and job.json()["details"][0]["field"] == "environment", job.text
        assert "does not exist in project 'envb'" in job.text
