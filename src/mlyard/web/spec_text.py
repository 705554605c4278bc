"""Between the submit page and a JobSpec: the form's fields as spec data, a spec as YAML to
edit, and where in the YAML text an error's field is, so the editor can say which line."""

from __future__ import annotations

from typing import Any

import yaml

from mlyard.api.errors import FieldError
from mlyard.spec import JobSpec

FORM_FIELDS = {
    "name": "name",
    "command": "command",
    "framework": "framework",
    "roles.0.replicas": "replicas",
    "roles.0.resources.cpu": "cpu",
    "roles.0.resources.memory": "memory",
    "roles.0.resources.gpu": "gpu",
    "queue": "queue",
    "project": "project",
    "priority": "priority",
    "max_runtime": "max_runtime",
    "restart_policy.max_restarts": "max_restarts",
    "env": "env",
}
"""A spec field's path → the form field that sets it (errors are shown beside that field)."""


def form_field(path: str) -> str:
    """The form field an error on the spec path `path` belongs beside (env.FOO → env), or the
    path itself when the form has no such field."""
    for prefix in sorted(FORM_FIELDS, key=len, reverse=True):
        if path == prefix or path.startswith(prefix + "."):
            return FORM_FIELDS[prefix]
    return path


def _env(text: str) -> dict[str, str] | str:
    """KEY=VALUE lines; a line that is not one is handed on as is, for the spec to refuse."""
    variables: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, separator, value = line.partition("=")
        if not separator or not key.strip():
            return line
        variables[key.strip()] = value
    return variables


def form_spec(fields: dict[str, str]) -> dict[str, Any]:
    """The spec data the form's fields describe; blank optional fields keep the spec's defaults."""

    def given(name: str) -> str | None:
        value = fields.get(name, "").strip()
        return value or None

    resources = {key: value for key in ("cpu", "memory", "gpu") if (value := given(key)) is not None}
    role: dict[str, Any] = {"resources": resources}
    if given("replicas") is not None:
        role["replicas"] = given("replicas")
    data: dict[str, Any] = {"name": fields.get("name", "").strip(), "command": fields.get("command", ""),
                            "roles": [role]}
    for key in ("framework", "queue", "project", "priority", "max_runtime"):
        if given(key) is not None:
            data[key] = given(key)
    if given("max_restarts") is not None:
        data["restart_policy"] = {"max_restarts": given("max_restarts")}
    if given("env") is not None:
        data["env"] = _env(fields["env"])
    return data


def spec_yaml(spec: JobSpec) -> str:
    """The spec as YAML without the fields left at their defaults: what a person would write."""
    data = spec.model_dump(mode="json", exclude_defaults=True)
    data = {"name": data.pop("name"), "command": data.pop("command"), **data}
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def field_line(text: str, path: str) -> int | None:
    """The 1-based line of the deepest part of `path` (e.g. roles.0.resources.gpu) written in the
    YAML text: the line of the wrong value, or of the mapping a missing field belongs in."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in path.split("."):
        if isinstance(node, yaml.MappingNode):
            match = next(((key, value) for key, value in node.value if key.value == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            break
    return line


def located_errors(errors: list[FieldError], text: str) -> list[FieldError]:
    """The errors with the YAML line they concern in front of the message."""
    located = []
    for error in errors:
        line = field_line(text, error.field)
        prefix = f"line {line}: " if line is not None else ""
        located.append(FieldError(field=error.field, message=prefix + error.message))
    return located
