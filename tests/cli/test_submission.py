"""Reading job files and `--set` overrides, before anything reaches the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlyard.cli.submission import UsageError, apply_overrides, load_spec_file, validate_spec


def base() -> dict:
    return {"name": "demo", "command": ["python", "train.py"], "roles": [{"name": "worker", "replicas": 2}]}


def test_overrides_reach_nested_fields_list_items_and_new_keys() -> None:
    data = apply_overrides(base(), ["roles.0.replicas=4", "env.LR=0.01", "max_runtime=2h", "priority=5",
                                    "roles.0.resources.gpu=1"])
    spec = validate_spec(data)
    assert spec.roles[0].replicas == 4 and spec.roles[0].resources.gpu == 1
    assert spec.env == {"LR": "0.01"}
    assert spec.max_runtime == 7200 and spec.priority == 5


def test_an_override_value_is_read_as_yaml() -> None:
    data = apply_overrides(base(), ["command=[python, other.py]", "framework=pytorch"])
    assert data["command"] == ["python", "other.py"] and data["framework"] == "pytorch"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("replicas", "expects key=value"),
        ("=3", "expects key=value"),
        ("roles.5.replicas=2", "not an index"),
        ("name.first=x", "cannot set a field inside a str"),
    ],
)
def test_bad_overrides_are_named(override: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        apply_overrides(base(), [override])


def test_validation_names_the_field_path() -> None:
    with pytest.raises(UsageError, match=r"roles\.0\.replicas"):
        validate_spec(apply_overrides(base(), ["roles.0.replicas=0"]))


def test_job_files_must_be_mappings_of_fields(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(UsageError, match="mapping of job fields"):
        load_spec_file(tmp_path / "list.yaml")
    with pytest.raises(UsageError, match="not valid YAML"):
        load_spec_file(tmp_path / "broken.yaml")
    (tmp_path / "job.json").write_text('{"name": "j", "command": "echo hi"}')
    assert validate_spec(load_spec_file(tmp_path / "job.json")).command == ["/bin/sh", "-c", "echo hi"]
