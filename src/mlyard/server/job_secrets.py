"""The server's key for `env_secrets`, and sealing and opening their values with it (Fernet:
AES-128-CBC with an HMAC-SHA256, so a value changed in the database is refused, not used).

The key file is created (mode 0600) at the first start. Servers sharing a database must share
it: a server that finds values it cannot open fails those jobs' starts with a message saying so.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from mlyard.errors import MlyardError


class SecretsUnreadable(MlyardError):
    """Stored secrets this server's key does not open."""


class SecretBox:
    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)
        self._key = key

    def seal(self, values: Mapping[str, str]) -> dict[str, str]:
        return {name: self._fernet.encrypt(value.encode()).decode("ascii") for name, value in values.items()}

    def open(self, sealed: Mapping[str, str]) -> dict[str, str]:
        opened, unreadable = {}, []
        for name, token in sealed.items():
            try:
                opened[name] = self._fernet.decrypt(token.encode("ascii")).decode()
            except (InvalidToken, UnicodeError, ValueError):
                unreadable.append(name)
        if unreadable:
            raise SecretsUnreadable(
                f"its env_secrets {', '.join(sorted(unreadable))} were sealed with another server key than this "
                "server's MLYARD_SECRET_KEY_FILE (servers sharing a database must share that file)")
        return opened

    def fingerprint(self, value: str) -> str:
        """Stands for a value where a digest of a request is kept (retries of a submission):
        keyed, so the digest cannot be used to guess the value."""
        return hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()


_boxes: dict[Path, SecretBox] = {}
_lock = threading.Lock()


def box_at(path: Path) -> SecretBox:
    """The box of the key in `path`, created there first if there is none."""
    path = Path(path)
    with _lock:
        if path not in _boxes:
            _boxes[path] = SecretBox(_read_or_create(path))
        return _boxes[path]


def _read_or_create(path: Path) -> bytes:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(Fernet.generate_key() + b"\n")
        try:
            os.link(temporary, path)  # never over a key another server just wrote
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    try:
        key = path.read_bytes().strip()
        Fernet(key)
    except (OSError, ValueError) as error:
        raise MlyardError(f"MLYARD_SECRET_KEY_FILE {path} cannot be read as a key: {error}") from None
    return key
