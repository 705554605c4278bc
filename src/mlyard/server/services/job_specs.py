"""A job's spec as each caller may see it, and the checks and sealing of a spec's hidden values.

`env` values are shown to the job's owner, the project's maintainers (administrators
included) and the job's own token; everyone else who may read the job sees its variable names
with `MASKED` values. `env_secrets` are shown to nobody: their names with `SECRET_SHOWN`.
"""

from __future__ import annotations

import json

from mlyard.errors import Forbidden, InvalidRequest
from mlyard.server import auth
from mlyard.server.job_secrets import SecretBox
from mlyard.server.store.rows import JobRow
from mlyard.spec import MAX_SECRET_BYTES, JobSpec

MASKED = "***"
SECRET_SHOWN = "(secret)"


def may_read_env(principal: auth.Principal, job: JobRow) -> bool:
    if principal.job_id is not None:
        return principal.job_id == job.id
    if principal.user_id is not None and job.owner_id == principal.user_id:
        return True
    held = principal.role_in(job.project)
    return held is not None and held >= auth.Role.MAINTAINER


def shown_spec(spec: JobSpec, *, env_visible: bool) -> JobSpec:
    update: dict[str, object] = {}
    if spec.env_secrets:
        update["env_secrets"] = dict.fromkeys(spec.env_secrets, SECRET_SHOWN)
    if not env_visible:
        update["env"] = dict.fromkeys(spec.env, MASKED)
        update["roles"] = [role.model_copy(update={"env": dict.fromkeys(role.env, MASKED)}) for role in spec.roles]
    return spec.model_copy(update=update) if update else spec


def refuse_shown_values(spec: JobSpec) -> None:
    """A spec copied from what the API shows must not submit the placeholders as values."""
    hint = "is how a hidden value is shown, not a value; give the value itself"
    for name, value in spec.env.items():
        if value == MASKED:
            raise InvalidRequest(f"env.{name}: {MASKED!r} {hint}", field=f"env.{name}")
    for index, role in enumerate(spec.roles):
        for name, value in role.env.items():
            if value == MASKED:
                raise InvalidRequest(f"roles.{index}.env.{name}: {MASKED!r} {hint}", field=f"roles.{index}.env.{name}")
    for name, value in spec.env_secrets.items():
        if value == SECRET_SHOWN:
            raise InvalidRequest(f"env_secrets.{name}: {SECRET_SHOWN!r} {hint}", field=f"env_secrets.{name}")


def sealed_spec(spec: JobSpec, box: SecretBox | None) -> JobSpec:
    """The spec as it is stored: its `env_secrets` values encrypted with the server's key."""
    if not spec.env_secrets:
        return spec
    if box is None:
        raise InvalidRequest("this server keeps no key for env_secrets", field="env_secrets")
    for name, value in spec.env_secrets.items():
        if len(value.encode()) > MAX_SECRET_BYTES:
            raise InvalidRequest(f"env_secrets.{name}: a secret value holds at most {MAX_SECRET_BYTES} bytes",
                                 field=f"env_secrets.{name}")
    return spec.model_copy(update={"env_secrets": box.seal(spec.env_secrets)})


def request_text(spec: JobSpec, box: SecretBox | None) -> str:
    """What the digest of a submission (for retries with the same Idempotency-Key) is taken of:
    the spec with each secret value replaced by its keyed fingerprint."""
    data = spec.model_dump(mode="json")
    if spec.env_secrets and box is not None:
        data["env_secrets"] = {name: box.fingerprint(value) for name, value in spec.env_secrets.items()}
    return json.dumps(data, sort_keys=True)


def check_resubmission(principal: auth.Principal, job: JobRow, spec: JobSpec) -> None:
    """Only who sees a job's env values may submit it again, and only its owner a job with
    env_secrets (anyone else would get values they may not read into a job of theirs)."""
    if spec.env_secrets and (principal.user_id is None or job.owner_id != principal.user_id):
        raise Forbidden(f"job {job.id} has env_secrets, which only its owner may submit again; submit a spec "
                        "of your own with your own secrets")
    has_env = bool(spec.env) or any(role.env for role in spec.roles)
    if has_env and not may_read_env(principal, job):
        raise Forbidden(f"job {job.id}'s env values are hidden from you (only its owner and the project's "
                        "maintainers see them), so you may not submit it again; submit a spec of your own")
