"""The environment a replica starts from: a few variables of the server's, never all of them.

The server's environment may hold MLYARD_DATABASE_URL with a password, MLYARD_SECRET_* or cloud
credentials. A replica (and its launcher) keeps only what a program needs to run and what the
administrator names in MLYARD_JOB_ENV_PASSTHROUGH (space-separated); the job's own `env` and
mlyard's variables (MLYARD_API, rendezvous, CUDA_VISIBLE_DEVICES, ...) are set on top.
"""

from __future__ import annotations

from collections.abc import Mapping

PASSTHROUGH = "MLYARD_JOB_ENV_PASSTHROUGH"
KEPT = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "USER", "LOGNAME",
        # Where the machine's libraries, CUDA, certificates and proxies are: jobs need them as the
        # server does, and they are the machine's settings, not the server's secrets.
        "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def scrubbed(source: Mapping[str, str], passthrough: tuple[str, ...] | None = None) -> dict[str, str]:
    """What of `source` a replica may see; `passthrough`: the administrator's extra names (None:
    those `source` itself lists in MLYARD_JOB_ENV_PASSTHROUGH, which is kept along with them)."""
    if passthrough is None:
        passthrough = tuple(source.get(PASSTHROUGH, "").split())
    kept = set(KEPT) | set(passthrough)
    environment = {key: value for key, value in source.items() if key in kept or key.startswith("LC_")}
    if passthrough:
        environment[PASSTHROUGH] = " ".join(passthrough)
    environment.setdefault("PATH", DEFAULT_PATH)
    return environment
