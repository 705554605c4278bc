"""What an environment build may reach, as the administrator sets it: the package index, extra
indexes, trusted hosts, whether pip may build from source, which bases an image may start from
and which account runs the build. Requests name packages only (`api.environments`); every pip
option comes from here."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mlyard.errors import MlyardError

BUILD_USERS = ("auto", "server")
# What an index URL and a host may hold: no whitespace, quotes or shell characters, since
# they reach pip's argv and a Containerfile's exec-form RUN.
_URL = re.compile(r"(https?|file)://[A-Za-z0-9._~:/?#\[\]@!&'()*+,;=%-]+")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?|\[[0-9A-Fa-f:]+\](:[0-9]{1,5})?")
_BASE_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]*")
# Locale and certificates are all a build needs of the server's environment.
_PASSED_ON = ("LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# The user and password part of a URL (`https://user:token@host/`).
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by `****`: build logs are read
    by a project's viewers, error messages by whoever asked."""
    return _USERINFO.sub("****@", text)


def _words(variable: str, value: str | None, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    words = tuple((value or "").split())
    for word in words:
        if not pattern.fullmatch(word):
            raise MlyardError(f"{variable}: {redact(word)!r} is not {what}")
    return words


@dataclass(frozen=True)
class BuildPolicy:
    index_url: str | None = None
    """MLYARD_PIP_INDEX_URL; None: pip's default (PyPI)."""
    extra_index_urls: tuple[str, ...] = ()
    """MLYARD_PIP_EXTRA_INDEX_URLS, space-separated."""
    trusted_hosts: tuple[str, ...] = ()
    """MLYARD_PIP_TRUSTED_HOSTS, space-separated: hosts pip may reach without valid HTTPS."""
    allow_source: bool = False
    """MLYARD_PIP_ALLOW_SOURCE: pip may build packages from source, running their build code
    (as the build account); off: wheels only (`--only-binary :all:`)."""
    bases: tuple[str, ...] = ()
    """MLYARD_ENVIRONMENT_BASES, space-separated image prefixes an environment may start from;
    empty: any image."""
    build_user: str = "auto"
    """MLYARD_BUILD_USER: `auto` (a root server builds as the unprivileged account
    `mlyard_build`; any other server as itself) or `server` (builds run as the server's own
    account, root included)."""

    def __post_init__(self) -> None:
        if self.build_user not in BUILD_USERS:
            raise MlyardError(f"MLYARD_BUILD_USER={self.build_user!r}: choose one of {', '.join(BUILD_USERS)}")

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> BuildPolicy:
        index = _words("MLYARD_PIP_INDEX_URL", environment.get("MLYARD_PIP_INDEX_URL"), _URL, "an http(s) or file URL")
        if len(index) > 1:
            raise MlyardError("MLYARD_PIP_INDEX_URL: one URL; extra indexes go in MLYARD_PIP_EXTRA_INDEX_URLS")
        source = (environment.get("MLYARD_PIP_ALLOW_SOURCE") or "").strip().lower()
        if source not in ("", "0", "1", "true", "false", "yes", "no", "on", "off"):
            raise MlyardError(f"MLYARD_PIP_ALLOW_SOURCE={source!r}: choose on or off")
        return cls(
            index_url=index[0] if index else None,
            extra_index_urls=_words("MLYARD_PIP_EXTRA_INDEX_URLS", environment.get("MLYARD_PIP_EXTRA_INDEX_URLS"),
                                    _URL, "an http(s) or file URL"),
            trusted_hosts=_words("MLYARD_PIP_TRUSTED_HOSTS", environment.get("MLYARD_PIP_TRUSTED_HOSTS"), _HOST,
                                 "a host name or host:port"),
            allow_source=source in ("1", "true", "yes", "on"),
            bases=_words("MLYARD_ENVIRONMENT_BASES", environment.get("MLYARD_ENVIRONMENT_BASES"), _BASE_PREFIX,
                         "an image prefix"),
            build_user=(environment.get("MLYARD_BUILD_USER") or "").strip() or "auto",
        )

    def pip_options(self) -> list[str]:
        """pip's options for every build, from this policy alone; `--isolated` makes pip ignore
        configuration files and PIP_* variables it might otherwise find."""
        options = ["--isolated", "--no-input", "--disable-pip-version-check", "--no-cache-dir"]
        if self.index_url:
            options += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            options += ["--extra-index-url", url]
        for host in self.trusted_hosts:
            options += ["--trusted-host", host]
        if not self.allow_source:
            options += ["--only-binary", ":all:"]
        return options

    def has_credentials(self) -> bool:
        """Whether an index URL holds a user name or password."""
        return any(_USERINFO.search(url) for url in (self.index_url or "", *self.extra_index_urls))

    def base_problem(self, base: str) -> str | None:
        """Why `base` may not start an environment here, or None."""
        if not self.bases or any(base.startswith(prefix) for prefix in self.bases):
            return None
        return f"{base!r} is not an allowed base here; the administrator allows: {', '.join(self.bases)}"


def build_environment(home: str, path: str | None = None) -> dict[str, str]:
    """The whole environment of a build's processes: a search path, the build account's home,
    the locale and certificate settings; never the server's other variables (database URLs,
    tokens) nor PIP_* variables, which pip would take as options."""
    environment = {"PATH": path or DEFAULT_PATH, "HOME": home, "LANG": os.environ.get("LANG", "C.UTF-8"),
                   "PYTHONNOUSERSITE": "1"}
    environment.update({name: os.environ[name] for name in _PASSED_ON if name in os.environ})
    return environment
