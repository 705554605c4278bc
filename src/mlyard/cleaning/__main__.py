"""`python -m mlyard.cleaning ROOT --files MANIFEST.json --report OUT.json [--distance 6]
[--predictions CSV]`: the cleaning report of the files under ROOT, as a job runs it
(`--checkpoint-report NAME` instead of `--report`: in the job's MLYARD_CHECKPOINT_DIR).

MANIFEST.json is a version's manifest (`{"files": [{"path", "sha256", "size"}, …]}`); without
it, ROOT's regular files are hashed (links are not followed). Progress goes to stdout a line at a
time (`hashing 1000/20000`), so the job's log shows it; the report is written whole or not at all,
and the last line is its summary. Bad input exits 1 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from mlyard.cleaning.extras import CleaningError

MAX_MANIFEST_BYTES = 256 * 1024 * 1024


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _fail(message)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m mlyard.cleaning", description="The cleaning report of a dataset's files.")
    parser.add_argument("root", type=Path, help="the folder holding the files")
    parser.add_argument("--files", type=Path, help="the version's manifest (else ROOT is walked and hashed)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--report", type=Path, help="where to write the report (JSON)")
    where.add_argument("--checkpoint-report", metavar="NAME",
                       help="write it as NAME in the job's MLYARD_CHECKPOINT_DIR, where the server collects it")
    parser.add_argument("--distance", type=int, default=6, help="perceptual hash bits apart of near-duplicates")
    parser.add_argument("--predictions", type=Path, help="out-of-sample predicted probabilities (CSV)")
    arguments = parser.parse_args(argv)
    if arguments.checkpoint_report is not None:
        arguments.report = _in_checkpoints(arguments.checkpoint_report)
    try:
        report = _run(arguments)
        _write_atomically(arguments.report, report)
    except CleaningError as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"{error.filename or ''}: {error.strerror or error}".lstrip(": "))
    print("summary " + json.dumps(report["summary"]), flush=True)
    return 0


def _in_checkpoints(name: str) -> Path:
    folder = os.environ.get("MLYARD_CHECKPOINT_DIR")
    if not folder:
        _fail("--checkpoint-report: MLYARD_CHECKPOINT_DIR is not set (it is in every mlyard job)")
    if "/" in name or name in ("", ".", ".."):
        _fail(f"--checkpoint-report: {name!r} is not a file name")
    return Path(folder) / name


def _run(arguments: argparse.Namespace) -> dict[str, Any]:
    from mlyard.cleaning.files import walk
    from mlyard.cleaning.report import build_report

    root = arguments.root
    if not root.is_dir():
        raise CleaningError(f"not a folder: {root}")
    files = _manifest(arguments.files) if arguments.files is not None else walk(root, _progress)
    return build_report(root, files, distance=arguments.distance, predictions=arguments.predictions,
                        progress=_progress)


def _manifest(source: Path) -> list[tuple[str, str, int]]:
    if source.stat().st_size > MAX_MANIFEST_BYTES:
        raise CleaningError(f"{source}: a manifest over {MAX_MANIFEST_BYTES // 2 ** 20} MiB")
    try:
        document = json.loads(source.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CleaningError(f"{source}: not JSON ({error})") from error
    entries = document.get("files") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise CleaningError(f'{source}: not a manifest: {{"files": [{{"path", "sha256", "size"}}, …]}}')
    files = []
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or not {"path", "sha256", "size"} <= entry.keys():
            raise CleaningError(f"{source}: files[{number}] is not {{path, sha256, size}}")
        files.append((entry["path"], entry["sha256"], entry["size"]))
    return files


def _progress(stage: str, done: int, total: int) -> None:
    print(f"{stage} {done}/{total}", flush=True)


def _write_atomically(target: Path, report: dict[str, Any]) -> None:
    """Written beside its place and renamed there: a reader never sees half a report."""
    folder = target.parent if str(target.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=1)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would keep it from whoever collects it
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _fail(message: str) -> NoReturn:
    print(f"mlyard.cleaning: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
