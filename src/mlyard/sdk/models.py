"""Registering a model from inside a job, with the job's own token:

    from mlyard.sdk import checkpoint, models

    save_file(model.state_dict(), os.path.join(os.environ["MLYARD_CHECKPOINT_DIR"], "final.safetensors"))
    models.register("digits-cnn", "final.safetensors", metrics={"accuracy": 0.97})

`path` is a file or folder of the job's checkpoint directory (`MLYARD_CHECKPOINT_DIR`), relative
to it or under it; the server copies those files into the registry as the model's next version
(the model is made if it does not exist), in the job's own project, with the job as its lineage
and the last value of each metric it reported (after the metrics `report` sent so far are
flushed), `metrics` over them. Safetensors is the format the server can describe (tensor names,
shapes, parameter counts); it never loads any file. Outside mlyard it raises.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlyard.sdk import checkpoint, metrics as reporting


class RegistrationError(RuntimeError):
    """The model could not be registered: outside a job, or refused by the server (why)."""


def register(name: str, path: str | os.PathLike[str] | None = None, *, metrics: dict[str, float] | None = None,
             format: str | None = None, parent: str | None = None, message: str = "",
             framework_version: str = "") -> Any:
    """The next version of model `name` of the job's project, from `path` (all of the checkpoint
    directory by default); returns the server's `ModelVersionCreated`."""
    job = os.environ.get(reporting.JOB_VARIABLE)
    if not os.environ.get(reporting.API_VARIABLE) or not job:
        raise RegistrationError("mlyard.sdk.models.register runs inside an mlyard job (no MLYARD_API or MLYARD_JOB_ID)")
    relative = _relative(path)
    reporting.flush()  # the metrics reported so far are stored before the server copies them
    from mlyard.client import Client, ClientError

    with Client(os.environ[reporting.API_VARIABLE], os.environ.get(reporting.TOKEN_VARIABLE)) as client:
        try:
            project = client.job(int(job)).project
            return client.models.register(project, name, int(job), path=relative, metrics=dict(metrics or {}),
                                          format=format, parent=parent, message=message,
                                          framework_version=framework_version)
        except ClientError as error:
            raise RegistrationError(f"model {name} was not registered: {error}") from None


def _relative(path: str | os.PathLike[str] | None) -> str | None:
    """`path` relative to the checkpoint directory (None: all of it)."""
    if path is None:
        return None
    root = Path(os.environ.get(checkpoint.DIRECTORY_VARIABLE) or checkpoint.DEFAULT_DIRECTORY).resolve()
    given = Path(path)
    if given.is_absolute():
        try:
            given = given.resolve().relative_to(root)
        except ValueError:
            raise RegistrationError(f"{path} is not under the job's checkpoint directory {root}") from None
    text = given.as_posix()
    return None if text in ("", ".") else text
