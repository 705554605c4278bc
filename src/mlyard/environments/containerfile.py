"""The Containerfile of an environment: its base, then apt packages, then pip requirements.

Every value in it is checked before it gets here (the base against `IMAGE_PATTERN`, apt names
against `APT_PACKAGE_PATTERN`, pip options from the administrator's `BuildPolicy`); pip runs in
exec form, without a shell, and the apt names follow `--`, so neither can become an option."""

from __future__ import annotations

import json
import re

from mlyard.api.environments import APT_PACKAGE_PATTERN, EnvironmentRequest
from mlyard.spec import IMAGE_PATTERN

REQUIREMENTS_FILE = "requirements.txt"
HASH_LABEL = "mlyard.environment.hash"


def containerfile(request: EnvironmentRequest, content_hash: str, pip_options: list[str] | None = None) -> str:
    # Checked again here: one line break in the base would add an instruction of its own.
    if not re.fullmatch(IMAGE_PATTERN, request.base):
        raise ValueError(f"base {request.base!r} is not an image reference")
    if not all(re.fullmatch(APT_PACKAGE_PATTERN, package) for package in request.apt):
        raise ValueError("apt: not Debian package names")
    if not re.fullmatch(r"[A-Za-z0-9]+", content_hash):
        raise ValueError(f"{content_hash!r} is not a content hash")
    lines = [f"FROM {request.base}", "USER root"]
    if request.apt:
        # One layer, without the package lists: the image stays small.
        lines.append("RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                     f"--no-install-recommends -- {' '.join(request.apt)} && rm -rf /var/lib/apt/lists/*")
    if request.requirements:
        installed = f"/tmp/mlyard-{REQUIREMENTS_FILE}"
        argv = ["python3", "-m", "pip", "install", *(pip_options or []), "-r", installed]
        lines += [f"COPY {REQUIREMENTS_FILE} {installed}", f"RUN {json.dumps(argv)}"]
    lines.append(f'LABEL {HASH_LABEL}="{content_hash}"')
    return "\n".join(lines) + "\n"
