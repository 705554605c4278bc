"""The vendored front-end files are there, are the versions frontend/package.json pins, and
are package data, so an installed mlyard serves them without npm or a network."""

from __future__ import annotations

import json
import tomllib
from pathlib import PurePosixPath

from conftest import REPOSITORY

PACKAGE = REPOSITORY / "src" / "mlyard"
VENDOR = PACKAGE / "web" / "static" / "vendor"
FILES = {
    "@annotorious/annotorious": ["annotorious.js", "annotorious.css", "package.json"],
    "htmx.org": ["htmx.min.js", "LICENSE"],
    "uplot": ["uPlot.iife.min.js", "uPlot.min.css", "LICENSE"],
    "swagger-ui-dist": ["swagger-ui-bundle.js", "swagger-ui.css", "LICENSE"],
}


def test_vendored_files_exist_and_match_the_pinned_versions() -> None:
    pinned = json.loads((REPOSITORY / "frontend" / "package.json").read_text())["dependencies"]
    assert set(pinned) == set(FILES)
    assert json.loads((VENDOR / "versions.json").read_text()) == pinned
    locked = json.loads((REPOSITORY / "frontend" / "package-lock.json").read_text())["packages"]
    for name, version in pinned.items():
        assert locked[f"node_modules/{name}"]["version"] == version, name
        for file in FILES[name]:
            assert (VENDOR / name / file).stat().st_size > 0, f"{name}/{file} is missing; run `make vendor`"
    assert f'version:"{pinned["htmx.org"]}"' in (VENDOR / "htmx.org" / "htmx.min.js").read_text()


def test_templates_and_static_files_are_package_data() -> None:
    patterns = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["mlyard"]
    web = PACKAGE / "web"
    files = [path for folder in ("templates", "static") for path in (web / folder).rglob("*") if path.is_file()]
    assert files
    for path in files:
        relative = PurePosixPath(path.relative_to(PACKAGE).as_posix())
        assert any(relative.match(pattern) for pattern in patterns), f"{relative} would not be installed"
