"""The Containerfile of an environment: its base, then apt packages, then pip requirements."""

from __future__ import annotations

from mlyard.api.environments import EnvironmentRequest

REQUIREMENTS_FILE = "requirements.txt"
HASH_LABEL = "mlyard.environment.hash"


def containerfile(request: EnvironmentRequest, content_hash: str) -> str:
    lines = [f"FROM {request.base}", "USER root"]
    if request.apt:
        # One layer, without the package lists: the image stays small.
        lines.append("RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                     f"--no-install-recommends {' '.join(request.apt)} && rm -rf /var/lib/apt/lists/*")
    if request.requirements:
        lines += [f"COPY {REQUIREMENTS_FILE} /tmp/mlyard-{REQUIREMENTS_FILE}",
                  f"RUN python3 -m pip install --no-cache-dir -r /tmp/mlyard-{REQUIREMENTS_FILE}"]
    lines.append(f'LABEL {HASH_LABEL}="{content_hash}"')
    return "\n".join(lines) + "\n"
