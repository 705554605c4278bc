"""Pushing a dataset against copying the same data on the same disk, in the same run.

Two datasets: `--small` files of 1 to 4 KiB in 100 folders (10,000 by default), and one file
of `--large-mib` MiB (1 GiB by default), both of random bytes. For each, in `--rounds` rounds:
- `cp -r` of the directory and `tar -cf` of it (the baselines; the copies are removed after);
- the first push, `mlyard datasets push` through the real CLI with an empty hash cache: hashing,
  asking which blobs are missing, uploading them, the manifest and the version;
- the push again of the unchanged directory, which must upload nothing (counted in the
  server's audit log, where every `PUT /blobs/{digest}` and every pack of small files,
  `PUT /blobs/pack`, is a row).
Each round pushes to a dataset of its own and a server of its own, so a round's first push
finds an empty store. Figures are medians of the rounds. MiB/s and files/s are of the data
pushed or copied.

Reading a version inside a job is measured by `bench/dataset_reads.py`.

Targets: the first push within 2× of `tar` (hashing included); the push again under 5% of the
first push's time, uploading no file. Exits 1 when a target is missed.

    .venv/bin/python bench/datasets.py [--small 10000] [--large-mib 1024] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench_server import BIN, BenchServer  # the bench folder is on sys.path

FIRST_PUSH_TARGET = 2.0
"""The first push's time over tar's."""
REPUSH_TARGET = 0.05
"""The push again's time over the first push's."""
_CHUNK = 16 << 20


def make_small(folder: Path, count: int) -> int:
    folder.mkdir(parents=True)
    total = 0
    for index in range(count):
        target = folder / f"part-{index % 100:03d}"
        target.mkdir(exist_ok=True)
        size = 1024 + (index * 7919) % 3072
        (target / f"{index:06d}.bin").write_bytes(os.urandom(size))
        total += size
    return total


def make_large(folder: Path, mib: int) -> int:
    folder.mkdir(parents=True)
    with open(folder / "large.bin", "wb") as sink:
        for _ in range(0, mib << 20, _CHUNK):
            sink.write(os.urandom(min(_CHUNK, mib << 20)))
    return (folder / "large.bin").stat().st_size


def timed(command: list[str], **options) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, **options)
    return time.perf_counter() - started


def push(server: BenchServer, name: str, folder: Path, cache: Path) -> tuple[float, dict]:
    """Wall time of `mlyard datasets push` and its answer; `cache`: the CLI's config folder, which
    holds its hash cache."""
    environment = {**server.environment, "MLYARD_CONFIG_DIR": str(cache)}
    started = time.perf_counter()
    result = subprocess.run([str(BIN / "mlyard"), "datasets", "push", name, str(folder), "--output", "json"],
                            env=environment, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, json.loads(result.stdout)


def uploads_since(server: BenchServer, moment: float) -> int:
    """Upload requests since `moment`: the `PUT /blobs/{digest}` and `PUT /blobs/pack` rows of the
    audit log."""
    page = server.client.audit(since=moment, route="/api/v1/blobs/", limit=1000)
    return sum(event.method == "PUT" for event in page.events)


def one_round(scratch: Path, folder: Path, label: str, index: int) -> dict[str, float]:
    copy, archive = scratch / f"copy-{index}", scratch / f"copy-{index}.tar"
    figures = {"cp": timed(["cp", "-r", str(folder), str(copy)])}
    shutil.rmtree(copy)
    figures["tar"] = timed(["tar", "-cf", str(archive), "-C", str(folder.parent), folder.name])
    archive.unlink()
    server = BenchServer(scratch / f"server-{label}-{index}")
    try:
        cache = scratch / f"cli-{label}-{index}"
        name = f"{label}-{index}"
        figures["push"], first = push(server, name, folder, cache)
        if not first["created"]:
            raise SystemExit(f"the first push of {label} made no version")
        before = time.time()
        figures["again"], again = push(server, name, folder, cache)
        if again["created"]:
            raise SystemExit(f"the push again of the unchanged {label} made a version")
        figures["again files"] = uploads_since(server, before)
    finally:
        server.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000, help="files of the small dataset")
    parser.add_argument("--large-mib", type=int, default=1024, help="MiB of the large dataset's one file")
    parser.add_argument("--rounds", type=int, default=2)
    arguments = parser.parse_args()
    console = Console(width=220)
    scratch = Path(tempfile.mkdtemp(prefix="mlyard-bench-datasets-"))
    missed: list[str] = []
    try:
        datasets = {"small": (scratch / "data" / "small", arguments.small),
                    "large": (scratch / "data" / "large", 1)}
        sizes = {"small": make_small(datasets["small"][0], arguments.small),
                 "large": make_large(datasets["large"][0], arguments.large_mib)}
        table = Table("dataset", "files", "MiB", "cp s", "tar s", "push s", "push MiB/s", "push files/s",
                      "push / tar", "push / cp", "again s", "again / push", "files uploaded again",
                      title="dataset push against cp and tar (medians)")
        for label, (folder, files) in datasets.items():
            rounds = [one_round(scratch, folder, label, index) for index in range(arguments.rounds)]
            median = {key: statistics.median(figures[key] for figures in rounds) for key in rounds[0]}
            mib = sizes[label] / (1 << 20)
            ratio, again = median["push"] / median["tar"], median["again"] / median["push"]
            table.add_row(label, f"{files:,}", f"{mib:,.0f}", f"{median['cp']:.2f}", f"{median['tar']:.2f}",
                          f"{median['push']:.2f}", f"{mib / median['push']:,.0f}", f"{files / median['push']:,.0f}",
                          f"{ratio:.2f}", f"{median['push'] / median['cp']:.2f}", f"{median['again']:.2f}",
                          f"{again:.3f}", f"{max(figures['again files'] for figures in rounds):.0f}")
            if ratio > FIRST_PUSH_TARGET:
                missed.append(f"{label}: the first push took {ratio:.2f}× tar's time (target ≤ {FIRST_PUSH_TARGET})")
            if again > REPUSH_TARGET:
                missed.append(f"{label}: the push again took {again:.1%} of the first (target ≤ {REPUSH_TARGET:.0%})")
            if any(figures["again files"] for figures in rounds):
                missed.append(f"{label}: the push again uploaded files")
        console.print(table)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for line in missed:
        console.print(f"missed: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
