"""What a model version's files say about it, read as data only: the server never loads a model
file (no pickle, no `torch.load`, no framework at all). It reads the header of a safetensors file
(8 bytes of little-endian length, then that much JSON, at most `MAX_HEADER_BYTES`) for tensor
names, dtypes, shapes and parameter counts, and small JSON files (a `config.json`) for their
scalar settings. Everything else is counted as bytes by media type. A file that is not what its
name says gives no figures, never an error."""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from mlyard.server.services.datasets.manifests import Entry

MAX_HEADER_BYTES = 16 * 1024 * 1024
"""A safetensors header read at most (its own library allows 100 MB; real ones are far smaller)."""
MAX_FILES_READ = 64
"""Safetensors files, and JSON files, read per version."""
MAX_TENSORS_SHOWN = 500
MAX_JSON_BYTES = 1024 * 1024
MAX_SETTINGS_SHOWN = 64
MAX_TEXT_SHOWN = 200
_GUESSES = ((".safetensors", "safetensors"), (".onnx", "onnx"), (".keras", "keras"), (".h5", "keras"),
            ("saved_model.pb", "tf-savedmodel"), (".torchscript", "torchscript"), (".pt", "pytorch-state-dict"),
            (".pth", "pytorch-state-dict"), (".bin", "pytorch-state-dict"))


def guess_format(paths: list[str]) -> str:
    """The format the files' names suggest (the first suffix of `_GUESSES` that a file has)."""
    for suffix, format_name in _GUESSES:
        if any(path.endswith(suffix) for path in paths):
            return format_name
    return "other"


def safetensors_header(path: Path) -> dict | None:
    """The tensors of a safetensors file's header: {"tensors", "parameters", "dtypes", "shown":
    [{name, dtype, shape}]}; None for a file that is not one."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) != 8:
                return None
            (length,) = struct.unpack("<Q", head)
            if length < 2 or length > MAX_HEADER_BYTES:
                return None
            document = json.loads(handle.read(length))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    tensors, dtypes, parameters = [], Counter(), 0
    for name, described in document.items():
        if name == "__metadata__":
            continue
        if not isinstance(described, dict):
            return None
        dtype, shape = described.get("dtype"), described.get("shape")
        if not isinstance(dtype, str) or not isinstance(shape, list) or not all(
                isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape):
            return None
        dtypes[dtype[:16]] += 1
        parameters += math.prod(shape)
        if len(tensors) < MAX_TENSORS_SHOWN:
            tensors.append({"name": name[:MAX_TEXT_SHOWN], "dtype": dtype[:16], "shape": shape[:8]})
    return {"tensors": len(document) - ("__metadata__" in document), "parameters": parameters,
            "dtypes": dict(dtypes.most_common()), "shown": tensors}


def json_settings(path: Path, size: int) -> dict | None:
    """The scalar settings at the top of a small JSON object (a model's `config.json`)."""
    if size > MAX_JSON_BYTES:
        return None
    try:
        document = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    settings = {}
    for key, value in list(document.items())[:MAX_SETTINGS_SHOWN]:
        if isinstance(value, str):
            settings[key[:MAX_TEXT_SHOWN]] = value[:MAX_TEXT_SHOWN]
        elif isinstance(value, (bool, int, float)) and not (isinstance(value, float) and not math.isfinite(value)):
            settings[key[:MAX_TEXT_SHOWN]] = value
        elif isinstance(value, list) and len(value) <= 16 and all(isinstance(item, str) for item in value):
            settings[key[:MAX_TEXT_SHOWN]] = [item[:MAX_TEXT_SHOWN] for item in value]
    return settings


def statistics(entries: list[Entry], blob_path: Callable[[str], Path]) -> dict:
    """Counts and bytes by media type, the safetensors files' tensors and parameters (and their
    sum), and the JSON files' settings. `blob_path`: digest → its file."""
    kinds: dict[str, dict[str, int]] = {}
    for entry in entries:
        figures = kinds.setdefault(entry.media_type or "unknown", {"files": 0, "bytes": 0})
        figures["files"] += 1
        figures["bytes"] += entry.size
    weights = {}
    for entry in [entry for entry in entries if entry.path.endswith(".safetensors")][:MAX_FILES_READ]:
        if (header := safetensors_header(blob_path(entry.digest))) is not None:
            weights[entry.path] = header
    configs = {}
    for entry in [entry for entry in entries if entry.path.endswith(".json")][:MAX_FILES_READ]:
        if (settings := json_settings(blob_path(entry.digest), entry.size)) is not None:
            configs[entry.path] = settings
    figures = {"files": len(entries), "bytes": sum(entry.size for entry in entries), "media_types": kinds}
    if weights:
        figures["safetensors"] = weights
        figures["parameters"] = sum(header["parameters"] for header in weights.values())
    if configs:
        figures["configs"] = configs
    return figures
