"""Turning a job file, `--set` overrides and the working directory into a submission."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

from mlyard.api.errors import field_errors, summarize
from mlyard.cli.console import errors
from mlyard.cli.options import UsageError
from mlyard.client import Client
from mlyard.spec import JobSpec
from mlyard.storage import pack_directory


def load_spec_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise UsageError(f"cannot read job file {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UsageError(f"{path} is not valid YAML or JSON: {error}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a mapping of job fields (name, command, roles, …)")
    return data


def add_secret_env(data: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """`--secret-env NAME`: the value of NAME in this environment, read here so that it never
    appears on a command line or in shell history."""
    for name in names:
        if name not in os.environ:
            raise UsageError(f"--secret-env {name}: {name} is not set in this environment")
        secrets = data.setdefault("env_secrets", {})
        if not isinstance(secrets, dict):
            raise UsageError("env_secrets must be a mapping of names to values")
        secrets[name] = os.environ[name]
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`key.sub=value` and `roles.0.replicas=4`; values are read as YAML scalars."""
    for override in overrides:
        key, separator, raw = override.partition("=")
        if not separator or not key:
            raise UsageError(f"--set expects key=value, got {override!r}")
        parts = key.split(".")
        # Environment values are strings as written: LR=0.010 must not become 0.01.
        value = raw if len(parts) > 1 and parts[-2] == "env" else (yaml.safe_load(raw) if raw else "")
        target: Any = data
        for position, part in enumerate(parts[:-1]):
            following = parts[position + 1]
            if isinstance(target, list):
                if not part.isdigit() or int(part) >= len(target):
                    raise UsageError(f"--set {key}: {'.'.join(parts[:position + 1])} is not an index of the list")
                target = target[int(part)]
            elif isinstance(target, dict):
                if part not in target or target[part] is None:
                    target[part] = [{}] if following.isdigit() and following == "0" else {}
                target = target[part]
            else:
                raise UsageError(f"--set {key}: {'.'.join(parts[:position + 1])} is not a mapping or a list")
        last = parts[-1]
        if isinstance(target, list):
            if not last.isdigit() or int(last) >= len(target):
                raise UsageError(f"--set {key}: {last} is not an index of the list")
            target[int(last)] = value
        elif isinstance(target, dict):
            target[last] = value
        else:
            raise UsageError(f"--set {key}: cannot set a field inside a {type(target).__name__}")
    return data


def validate_spec(data: dict[str, Any]) -> JobSpec:
    try:
        return JobSpec.model_validate(data)
    except ValidationError as error:
        raise UsageError(f"invalid job spec: {summarize(field_errors(error.errors()))}") from None


def upload_code(client: Client, directory: Path, *, max_bytes: int,
                projects: Collection[str | None] = (None,)) -> str:
    """Packs `directory` (honouring .gitignore and .mlyardignore) once, uploads it for each of
    `projects` (None: whichever project the job joins) unless the server already has it there,
    and returns its digest. Shows progress bars on a terminal."""
    with tempfile.TemporaryDirectory(prefix="mlyard-snapshot-") as scratch:
        with _progress() as progress:
            packing = progress.add_task("packing code", total=None)

            def on_pack(done: int, total: int) -> None:
                progress.update(packing, completed=done, total=total)

            packed = pack_directory(directory, Path(scratch) / "snapshot.tar.gz", max_bytes=max_bytes,
                                    progress=on_pack)
            for project in projects:
                if client.snapshot_exists(packed.digest, project=project):
                    progress.update(packing, description="code already on the server")
                    continue
                uploading = progress.add_task("uploading code" + (f" to {project}" if len(projects) > 1 else ""),
                                              total=packed.size)
                client.upload_snapshot(packed.path, packed.digest, project=project,
                                       progress=lambda sent, task=uploading: progress.advance(task, sent))
        return packed.digest


def snapshot_project(spec: JobSpec) -> str | None:
    """The project a code upload for `spec` goes to: the one its file names keeps the code from
    the upload on, within its storage limit; otherwise (None) the submission charges whichever
    project the job joins."""
    return spec.project if "project" in spec.model_fields_set else None


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=errors,
        transient=not errors.is_terminal,
    )
