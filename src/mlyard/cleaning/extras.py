"""The optional libraries a report needs, imported when first used: the server imports
`mlyard.cleaning.labels` and must not need them."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

INSTALL = "pip install 'mlyard[cleaning]'"


class CleaningError(ValueError):
    """Bad input to a report (a manifest, a predictions file) or a missing library: one line to show."""


def imagehash() -> ModuleType:
    try:
        import imagehash as module
    except ImportError as error:
        raise CleaningError(f"perceptual hashes need imagehash ({error}): {INSTALL}") from error
    return module


def numpy() -> ModuleType:
    try:
        import numpy as module
    except ImportError as error:
        raise CleaningError(f"near-duplicate search needs numpy ({error}): {INSTALL}") from error
    return module


def find_label_issues() -> Callable[..., Any]:
    try:
        from cleanlab.filter import find_label_issues as function
    except ImportError as error:
        raise CleaningError(f"label issues need cleanlab ({error}): {INSTALL}") from error
    return function
