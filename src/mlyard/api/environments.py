"""What the API takes and returns about environments: a base plus packages, built once per
distinct content into a container image (with an engine) or a virtualenv (without)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlyard.spec import IMAGE_PATTERN, NAME_PATTERN

EnvironmentStatus = Literal["queued", "building", "ready", "failed"]
EnvironmentKind = Literal["image", "virtualenv"]
# Debian package names (policy §5.6.1), optionally pinned with =VERSION.
APT_PACKAGE_PATTERN = r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?$"
MAX_REQUIREMENTS = 64 * 1024
MAX_REQUIREMENT_LINES = 1000
DEFAULT_PROJECT = "default"
# pip reads ` #` as the start of a comment (and `#` at the start of a line).
_COMMENT = re.compile(r"(^|\s)#.*$")
_REFUSED = "is not a package requirement (PEP 508): options, paths and URLs are not allowed"


def parse_requirements(text: str) -> list[str]:
    """The requirements as canonical PEP 508 lines (name, extras, versions, markers): what pip
    reads as a file option, a path, a URL, a direct reference or an environment variable is
    refused with its line number, so a requirements text can only name packages of the index
    the administrator chose."""
    if "\x00" in text:
        raise ValueError("the requirements hold a NUL character")
    lines = text.splitlines()
    if len(lines) > MAX_REQUIREMENT_LINES:
        raise ValueError(f"{len(lines)} lines; at most {MAX_REQUIREMENT_LINES} are allowed")
    parsed = []
    for number, line in enumerate(lines, start=1):
        stripped = _COMMENT.sub("", line).strip()
        if not stripped:
            continue
        shown = stripped if len(stripped) <= 80 else stripped[:77] + "..."
        # `$`: pip expands ${VARIABLE} from the builder's environment; `\\`: it joins lines.
        if stripped.startswith("-") or "$" in stripped or "\\" in stripped:
            raise ValueError(f"line {number}: {shown!r} {_REFUSED}")
        try:
            requirement = Requirement(stripped)
        except InvalidRequirement:
            raise ValueError(f"line {number}: {shown!r} {_REFUSED}") from None
        if requirement.url is not None:
            raise ValueError(f"line {number}: {shown!r} {_REFUSED}")
        parsed.append(str(requirement))
    return parsed


class EnvironmentRequest(BaseModel):
    """`mlyard env build NAME --from BASE [--requirements FILE] [--apt PKG …]`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="lowercase letters, digits and dashes; unique on the "
                      "server, whatever the project")
    project: str = Field(default=DEFAULT_PROJECT, pattern=NAME_PATTERN,
                         description="the project it belongs to: its members use it, its maintainers build it")
    base: str = Field(max_length=255, pattern=IMAGE_PATTERN, description="the image it starts from")
    requirements: str | None = Field(default=None, max_length=MAX_REQUIREMENTS,
                                     description="PEP 508 requirements, one a line (comments allowed); "
                                     "options, paths and URLs are refused")
    apt: list[str] = Field(default_factory=list, max_length=200, description="Debian packages to install")

    @field_validator("apt")
    @classmethod
    def _apt(cls, packages: list[str]) -> list[str]:
        for index, package in enumerate(packages):
            if not re.fullmatch(APT_PACKAGE_PATTERN, package):
                raise ValueError(f"apt.{index}: {package!r} is not a Debian package name")
        return sorted(set(packages))

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, text: str | None) -> str | None:
        if text is None:
            return None
        return "\n".join(parse_requirements(text)) or None

    def content_hash(self, kind: EnvironmentKind) -> str:
        """The same inputs built the same way give the same hash: nothing is built twice."""
        content = {"kind": kind, "base": self.base, "requirements": self.requirements or "", "apt": self.apt}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


class EnvironmentInfo(BaseModel):
    name: str
    project: str
    base: str
    requirements: str | None
    apt: list[str]
    kind: EnvironmentKind | None = Field(description="image: built by the container engine; virtualenv: "
                                         "without one; null until its build starts")
    content_hash: str | None
    status: EnvironmentStatus
    message: str | None = Field(description="why it failed, or what it reused")
    image: str | None = Field(description="the built image's tag, or the virtualenv's directory")
    cached: bool = Field(description="the build was skipped: an environment of the same content was ready")
    created_by: str | None
    created_at: float
    built_at: float | None
    log_tail: list[str] = Field(default_factory=list, description="the last lines of the build's output")
