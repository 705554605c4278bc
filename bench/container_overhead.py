"""Containers against plain processes: the digits DDP example (examples/digits-ddp.yaml, 2
replicas of 1 core) as processes on the host and in containers of the local engine, on one
embedded server, interleaved in the same invocation.

Prints the median wall time (submission → the job's end) and the median samples/s the job
reports (rank 0's epochs after the first, `report(samples_per_second=…)`) of each, and the
container's cost as ratios: wall time container ÷ processes, samples/s processes ÷ container.
Target: both ≤ 1.03. Exits 1 when a target is missed. Two more rows split the start: submission
→ every replica running (creating and starting the containers, or the launchers), and running
→ the first epoch reported (imports, rendezvous, data, one epoch).

The containers run `localhost/mlyard-bench-digits:latest`: the test image
(`scripts/build-test-image.sh`: Debian bookworm minbase, its Python 3.11, CPU torch and
numpy) plus, installed the same way (this Python's pip, `--target`, the versions installed
here), what the example imports besides: scikit-learn (the digits) and the client libraries
`mlyard.sdk.report` uses, all byte-compiled (the test image's torch is installed without .pyc
files, which a container's `nobody` cannot write: every start would compile torch's modules
again, about 10 s more start-up here). It is built once, and again only when those versions
change; mlyard itself comes from the job's code (`PYTHONPATH=src`, on both sides). The
processes run this virtualenv's Python and the same torch wheel.

Needs root, podman and an engine answering on MLYARD_CONTAINER_SOCKET (default
/run/podman/podman.sock; `.ci/run` shows how to start one).

    .venv/bin/python bench/container_overhead.py [--repeats 5] [--epochs 10]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from rich.console import Console
from rich.table import Table

from bench_server import REPOSITORY, BenchServer  # the bench folder is on sys.path
EXAMPLE = REPOSITORY / "examples" / "digits-ddp.yaml"
BASE_IMAGE = os.environ.get("MLYARD_TEST_IMAGE", "localhost/mlyard-test-base:latest")
IMAGE = "localhost/mlyard-bench-digits:latest"
SOCKET = os.environ.get("MLYARD_CONTAINER_SOCKET", "/run/podman/podman.sock")
# What the example imports that the test image lacks; their dependencies come along.
ROOTS = ("scikit-learn", "httpx", "pydantic", "PyYAML", "click", "rich", "packaging")
IN_BASE = {"numpy", "torch"}  # the test image has these, at the versions pinned here
TARGET = 1.03
# What is added on the test image. Byte-compiled, torch's modules of the test image too: the job
# runs as `nobody`, who cannot write __pycache__ there, and would compile every module at every
# start (torch ships a test helper in 3.12 syntax: left out).
IMAGE_STEPS = ("COPY site /usr/local/lib/python3.11/dist-packages/\n"
               "RUN python3 -m compileall -q -j 0 -x py312_intrinsics /usr/local/lib/python3.11/dist-packages\n")


def installed_closure(roots: tuple[str, ...]) -> list[str]:
    """`name==version` of `roots` and everything they need, as installed in this environment."""
    pins: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in pins or key in IN_BASE:
            continue
        distribution = metadata.distribution(name)
        pins[key] = f"{distribution.metadata['Name']}=={distribution.version}"
        for line in distribution.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return sorted(pins.values())


def image_recipe(pins: list[str]) -> str:
    base = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", BASE_IMAGE],
                          capture_output=True, text=True, check=False)
    if base.returncode != 0:
        raise SystemExit(f"the test image {BASE_IMAGE} is not here: build it with scripts/build-test-image.sh")
    text = "\n".join([IMAGE_STEPS, base.stdout.strip(), *pins])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_image(console: Console) -> None:
    """Builds IMAGE on the test image unless one from the same recipe is there."""
    pins = installed_closure(ROOTS)
    recipe = image_recipe(pins)
    current = subprocess.run(["podman", "image", "inspect", "--format", '{{ index .Labels "mlyard.recipe" }}', IMAGE],
                             capture_output=True, text=True, check=False)
    if current.returncode == 0 and current.stdout.strip() == recipe:
        return
    console.print(f"building {IMAGE} on {BASE_IMAGE}: {' '.join(pins)}", style="dim")
    replaced = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", IMAGE],
                              capture_output=True, text=True, check=False).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-image-", dir="/var/tmp") as context:
        site = Path(context) / "site"
        installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                                    "--no-warn-script-location", "--target", str(site), *pins],
                                   capture_output=True, text=True, check=False)
        if installed.returncode != 0:
            raise SystemExit(f"pip install --target failed:\n{installed.stdout}{installed.stderr}")
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts name this machine's Python
        (Path(context) / "Containerfile").write_text(f"FROM {BASE_IMAGE}\n{IMAGE_STEPS}LABEL mlyard.recipe={recipe}\n")
        subprocess.run(["podman", "build", "--quiet", "--network=host", "-t", IMAGE, context], check=True,
                       stdout=subprocess.DEVNULL)
    if replaced:  # the image an older recipe built, untagged now
        subprocess.run(["podman", "rmi", replaced], capture_output=True, check=False)
    # What the example imports, mlyard from the source tree as the job gets it from its code.
    subprocess.run(["podman", "run", "--rm", "--network=host", "-v", f"{REPOSITORY / 'src'}:/src:ro",
                    "-e", "PYTHONPATH=/src", IMAGE, "python3", "-c",
                    "import sklearn.datasets, torch; from mlyard.sdk import report; from mlyard.client import Client"],
                   check=True)


class Bench:
    def __init__(self, scratch: Path, epochs: int):
        self.server = BenchServer(scratch, MLYARD_NODE_CPUS="2", MLYARD_RUNTIME="container",
                                  MLYARD_CONTAINER_SOCKET=SOCKET)
        self.home, self.environment, self.client = self.server.home, self.server.environment, self.server.client
        spec = yaml.safe_load(EXAMPLE.read_text())
        # python3: the image's name for its Python; here the virtualenv's, first on the PATH.
        spec.update(snapshot=self.server.snapshot, command=["python3", "examples/digits_ddp.py", "--epochs", str(epochs)],
                    env={**spec.get("env", {}), "PYTHONPATH": "src"})
        self.spec = spec

    def run(self, image: str | None) -> dict[str, float]:
        """The job's wall seconds (submission → its end), its median samples/s over its epochs
        but the first, and where the start went: submission → every replica running, and
        running → the first epoch reported (imports, rendezvous, data, one epoch)."""
        spec = dict(self.spec, name="digits-container" if image else "digits-processes")
        if image:
            spec["image"] = image
        started = time.perf_counter()
        job = self.client.submit(spec)
        while not (detail := self.client.job(job.id)).status.is_terminal:
            time.sleep(0.05)
        wall = time.perf_counter() - started
        if detail.status.value != "SUCCEEDED":
            log = "\n".join(line for lines in detail.log_tail.values() for line in lines)
            raise SystemExit(f"job {job.id} ({'container' if image else 'processes'}) ended {detail.status.value}: "
                             f"{detail.message}\n{log}")
        points = self.client.metrics(job.id, names=["samples_per_second"]).points
        if not points:
            log = self.client.logs(job.id, replica="worker-0").text
            raise SystemExit(f"job {job.id} reported no samples/s:\n{log[-2000:]}")
        running = max(replica.started_at for replica in detail.attempts[-1].replicas)
        return {
            "wall": wall,
            "samples/s": statistics.median([point.value for point in points if point.step > 1]
                                           or [point.value for point in points]),
            "to running": running - detail.submitted_at,
            "to first epoch": min(point.at for point in points) - running,
        }

    def close(self) -> None:
        self.server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    arguments = parser.parse_args()
    console = Console(width=150)
    if shutil.which("podman") is None:
        raise SystemExit("podman is not installed (see .ci/run)")
    ensure_image(console)

    runs: dict[str, list[dict[str, float]]] = {"processes": [], "container": []}
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-") as scratch:
        bench = Bench(Path(scratch), arguments.epochs)
        try:
            for repeat in range(arguments.repeats):
                # Interleaved, and each side first every other time: drift on a noisy machine
                # hits both alike.
                order = ("processes", "container") if repeat % 2 == 0 else ("container", "processes")
                for side in order:
                    runs[side].append(bench.run(IMAGE if side == "container" else None))
                console.print(f"run {repeat + 1}/{arguments.repeats}: " + "; ".join(
                    f"{side} " + ", ".join(f"{key} {value:.2f}" for key, value in runs[side][-1].items())
                    for side in runs), style="dim")
        finally:
            bench.close()

    def median(side: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[side])

    table = Table(title=f"digits DDP, 2 replicas × 1 core, {arguments.epochs} epochs, median of {arguments.repeats}")
    for column in ("measure", "processes (baseline)", "container", "container cost ratio", "target", "met"):
        table.add_column(column)
    wall_ratio = median("container", "wall") / median("processes", "wall")
    rate_ratio = median("processes", "samples/s") / median("container", "samples/s")
    table.add_row("wall time: submit → end", f"{median('processes', 'wall'):.2f}s",
                  f"{median('container', 'wall'):.2f}s", f"{wall_ratio:.3f}", f"≤ {TARGET}",
                  "yes" if wall_ratio <= TARGET else "NO")
    table.add_row("samples/s (rank 0's epochs 2…)", f"{median('processes', 'samples/s'):.0f}",
                  f"{median('container', 'samples/s'):.0f}", f"{rate_ratio:.3f}", f"≤ {TARGET}",
                  "yes" if rate_ratio <= TARGET else "NO")
    for key, label in (("to running", "of the wall: submit → replicas running"),
                       ("to first epoch", "of the wall: running → 1st epoch reported")):
        table.add_row(label, f"{median('processes', key):.2f}s", f"{median('container', key):.2f}s",
                      f"{median('container', key) / median('processes', key):.3f}", "-", "-")
    console.print(table)
    return 0 if wall_ratio <= TARGET and rate_ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
