"""How the client finds the server and its token: MLYARD_URL, MLYARD_TOKEN, the credentials
`mlyard login` stored, and the files the server of MLYARD_HOME wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlyard.paths import DEFAULT_HOST, DEFAULT_PORT, Paths, home_directory


def server_url(paths: Paths | None = None) -> str:
    """MLYARD_URL, else the URL the server of MLYARD_HOME wrote at start, else the default."""
    if os.environ.get("MLYARD_URL"):
        return os.environ["MLYARD_URL"].rstrip("/")
    paths = paths or Paths(home_directory())
    try:
        return json.loads(paths.server_info.read_text())["url"].rstrip("/")
    except (OSError, ValueError, KeyError):
        return f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


def credentials_file() -> Path:
    """Where `mlyard login` keeps a token per server: MLYARD_CONFIG_DIR, else the XDG config folder."""
    folder = os.environ.get("MLYARD_CONFIG_DIR") or Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "mlyard"
    return Path(folder).expanduser() / "credentials.json"


def stored_credentials() -> dict[str, dict]:
    """Server URL → {"token", "user", "token_id"}; an unreadable file counts as none."""
    try:
        stored = json.loads(credentials_file().read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def store_credentials(url: str, entry: dict | None) -> Path:
    """Saves (or with None forgets) the token for `url`, readable by its owner only."""
    stored = stored_credentials()
    if entry is None:
        stored.pop(url, None)
    else:
        stored[url] = entry
    path = credentials_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(stored, handle, indent=2)
    os.replace(temporary, path)
    return path


def api_token(paths: Paths | None = None) -> str | None:
    """MLYARD_TOKEN, else the token `mlyard login` stored for the server, else the admin token
    the server of MLYARD_HOME wrote at its first start."""
    if os.environ.get("MLYARD_TOKEN"):
        return os.environ["MLYARD_TOKEN"]
    paths = paths or Paths(home_directory())
    entry = stored_credentials().get(server_url(paths))
    if isinstance(entry, dict) and isinstance(entry.get("token"), str):
        return entry["token"]
    try:
        return paths.admin_token.read_text().strip() or None
    except OSError:
        return None
