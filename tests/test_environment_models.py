"""Environment requests: what is built once (the content hash), what is refused, and the
Containerfile an image build gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mlyard.api.environments import EnvironmentRequest
from mlyard.environments import containerfile
from mlyard.environments.virtualenv import BuildFailed, VirtualenvBuilder


def request(**fields) -> EnvironmentRequest:
    return EnvironmentRequest(**{"name": "env", "base": "python:3.11-slim", **fields})


def test_the_hash_follows_content_not_spelling() -> None:
    one = request(requirements="torch==2.13.0\n\n  numpy==2.1.0  \n", apt=["git", "curl", "git"])
    other = request(name="other", requirements="torch==2.13.0\nnumpy==2.1.0", apt=["curl", "git"])
    assert one.content_hash("image") == other.content_hash("image")
    assert one.content_hash("image") != one.content_hash("virtualenv")
    assert one.content_hash("image") != request(requirements="torch==2.13.0").content_hash("image")
    assert request().content_hash("image") != request(base="python:3.12-slim").content_hash("image")


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"base": "Not An Image"}, "base", "should match pattern"),
    ({"apt": ["ok", "rm -rf /"]}, "apt", "apt.1: 'rm -rf /' is not a Debian package name"),
    ({"name": "Bad_Name"}, "name", "should match pattern"),
    ({"requirements": "a\x00b"}, "requirements", "NUL"),
])
def test_bad_requests_name_the_field(fields: dict, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        request(**fields)
    (error,) = raised.value.errors()
    assert error["loc"][0] == field and message in str(error["msg"])


def test_the_containerfile_installs_apt_then_pip_and_labels_the_hash() -> None:
    wanted = request(requirements="numpy==2.1.0", apt=["libgl1"])
    text = containerfile(wanted, "abc123")
    lines = text.splitlines()
    assert lines[0] == "FROM python:3.11-slim"
    assert "apt-get install -y --no-install-recommends -- libgl1" in text
    assert text.index("apt-get") < text.index('"pip", "install"')
    assert lines[-1] == 'LABEL mlyard.environment.hash="abc123"'
    assert "COPY" not in containerfile(request(), "h"), "nothing to copy without requirements"


def test_without_an_engine_apt_packages_are_refused_before_anything_is_built(tmp_path) -> None:
    builder = VirtualenvBuilder(tmp_path / "envs")
    with pytest.raises(BuildFailed, match="need a container engine"):
        builder.build(request(apt=["curl"]), "h1", lambda line: None)
    assert not (tmp_path / "envs" / "h1").exists()
