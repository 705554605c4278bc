"""The submit page's translation between form fields, spec data and YAML text."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from mlyard.api.errors import FieldError, field_errors
from mlyard.spec import JobSpec
from mlyard.web.spec_text import (
    field_line,
    form_field,
    form_spec,
    located_errors,
    spec_yaml,
)

FORM = {"name": "train", "command": "python train.py --lr 0.1", "framework": "pytorch", "replicas": "2", "cpu": "1.5",
        "memory": "2Gi", "gpu": "0", "queue": "vision", "project": "lab", "priority": "5", "max_runtime": "2h",
        "max_restarts": "3", "env": "LR=0.010\n\n# a comment\nMODE=a=b"}


def test_the_form_becomes_the_spec_it_describes() -> None:
    spec = JobSpec.model_validate(form_spec(FORM))
    assert spec.command == ["/bin/sh", "-c", "python train.py --lr 0.1"]
    (role,) = spec.roles
    assert (role.replicas, role.resources.cpu, role.resources.memory, role.resources.gpu) == (2, 1.5, 2 << 30, 0)
    assert (spec.framework, spec.queue, spec.project, spec.priority) == ("pytorch", "vision", "lab", 5)
    assert spec.max_runtime == 7200
    assert spec.restart_policy.max_restarts == 3
    assert spec.env == {"LR": "0.010", "MODE": "a=b"}  # values as written, split at the first =


def test_blank_optional_fields_keep_the_defaults() -> None:
    spec = JobSpec.model_validate(form_spec({"name": "quick", "command": "true", "max_runtime": " ", "env": ""}))
    assert spec == JobSpec(name="quick", command=["/bin/sh", "-c", "true"])


@pytest.mark.parametrize(("changes", "field"), [
    ({"name": "Bad Name"}, "name"),
    ({"command": "  "}, "command"),
    ({"replicas": "0"}, "replicas"),
    ({"memory": "lots"}, "memory"),
    ({"gpu": "-1"}, "gpu"),
    ({"max_runtime": "soon"}, "max_runtime"),
    ({"max_restarts": "x"}, "max_restarts"),
    ({"env": "JUST_A_NAME"}, "env"),
    ({"priority": "5000"}, "priority"),
])
def test_each_bad_field_is_reported_on_that_field(changes: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(form_spec({**FORM, **changes}))
    assert {form_field(error.field) for error in field_errors(caught.value.errors())} == {field}


def test_a_path_the_form_has_no_field_for_stays_as_it_is() -> None:
    assert form_field("env.LR") == "env"
    assert form_field("roles.0.resources.gpu_models") == "roles.0.resources.gpu_models"
    assert form_field("roles.1.replicas") == "roles.1.replicas"


def test_a_cloned_spec_reads_back_as_the_same_spec_without_its_defaults() -> None:
    spec = JobSpec.model_validate({**form_spec(FORM), "snapshot": "a" * 64})
    text = spec_yaml(spec)
    assert text.startswith("name: train\ncommand:")
    assert "restart_policy:\n  max_restarts: 3" in text
    assert "interactive" not in text  # left at its default
    assert JobSpec.model_validate(yaml.safe_load(text)) == spec


SPEC = """\
name: demo
command: [python, train.py]
roles:
  - name: worker
    replicas: 2
  - name: ps
    resources:
      gpu: -1
"""


@pytest.mark.parametrize(("path", "line"), [
    ("name", 1),
    ("roles.0.replicas", 5),
    ("roles.1.resources.gpu", 8),
    ("roles.1.resources.cpu", 7),  # missing: the mapping it belongs in
    ("env", None),
    ("roles.9.name", 3),
])
def test_an_error_is_located_on_its_line(path: str, line: int | None) -> None:
    assert field_line(SPEC, path) == line


def test_errors_of_a_yaml_spec_name_their_line() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(yaml.safe_load(SPEC))
    located = located_errors(field_errors(caught.value.errors()), SPEC)
    assert located == [FieldError(field="roles.1.resources.gpu",
                                  message="line 8: Input should be greater than or equal to 0")]
    assert field_line("name: [unclosed", "name") is None
