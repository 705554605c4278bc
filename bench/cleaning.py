"""The cleaning report of a 20,000-image version, and its near-duplicate search against comparing
every pair of the same hashes.

The images are scikit-learn's digits upscaled to 32×32, each turned and shifted at random (so
that few are alike) and re-encoded, a fifth as JPEG; planted among them: exact copies, near
copies (JPEG re-encodes), truncated files, PNGs named .jpg, copies under another class and near
copies from train into test. The report runs as `python -m mlyard.cleaning` runs it, on a manifest
(the files' sha256 computed first, as a version's manifest gives them). Then the perceptual
hashes of the same files are searched twice in the same run: by the report's multi-index search
(`near.near_pairs`) and by all pairs (numpy: xor and popcount of each hash against every later
one), and both must find the same pairs. `--scale N` repeats that search on N hashes made from
the real ones with a few bits flipped, to show how each grows.

    .venv/bin/python bench/cleaning.py [--images 20000] [--distance 6] [--scale 0]
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from rich.console import Console
from rich.table import Table
from sklearn.datasets import load_digits

from mlyard.cleaning import images, near
from mlyard.cleaning.files import walk
from mlyard.cleaning.labels import is_image
from mlyard.cleaning.report import build_report

SIZE = 32
PLANTS = {"exact": 200, "near": 100, "truncated": 50, "wrong_extension": 20, "conflicts": 20, "leaks": 20}


def generate(root: Path, count: int, rng: random.Random) -> dict[str, list]:
    """`count` files under root (train/<label>/<n>.png, a fifth in test/), planted problems
    included; returns the planted paths by kind."""
    digits = load_digits()
    base = count - PLANTS["exact"] - PLANTS["near"] - PLANTS["conflicts"] - PLANTS["leaks"]
    written = []
    for number in range(base):
        index = rng.randrange(len(digits.images))
        image = Image.fromarray((digits.images[index] * 255 / 16).astype("uint8"), mode="L")
        image = image.resize((SIZE, SIZE), Image.BICUBIC).rotate(
            rng.uniform(-15, 15), resample=Image.BILINEAR, translate=(rng.randint(-3, 3), rng.randint(-3, 3)))
        split = "test" if number % 5 == 0 else "train"
        jpeg = rng.random() < 0.2
        path = root / split / str(digits.target[index]) / f"{number}{'.jpg' if jpeg else '.png'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path, "JPEG" if jpeg else "PNG", **({"quality": 90} if jpeg else {}))
        written.append(path)
    return plant(root, [path for path in written if path.parts[-3] == "train"], rng)


def plant(root: Path, train: list[Path], rng: random.Random) -> dict[str, list]:
    picks = iter(rng.sample(train, sum(PLANTS.values())))
    planted: dict[str, list] = {kind: [] for kind in PLANTS}
    for _ in range(PLANTS["exact"]):
        original = next(picks)
        shutil.copy(original, copy := original.with_name(f"{original.stem}_copy{original.suffix}"))
        planted["exact"].append((original, copy))
    for kind, folder in (("near", None), ("leaks", "test")):
        for _ in range(PLANTS[kind]):
            original = next(picks)
            target = original.parent if folder is None else root / folder / original.parent.name
            target.mkdir(parents=True, exist_ok=True)
            out = io.BytesIO()
            Image.open(original).convert("L").save(out, "JPEG", quality=85)
            (copy := target / f"{original.stem}_{kind}.jpg").write_bytes(out.getvalue())
            planted[kind].append((original, copy))
    for _ in range(PLANTS["truncated"]):
        original = next(picks)
        original.write_bytes(original.read_bytes()[: original.stat().st_size // 2])
        planted["truncated"].append(original)
    for _ in range(PLANTS["conflicts"]):
        original = next(picks)
        other = original.parents[1] / str((int(original.parent.name) + 1) % 10)
        shutil.copy(original, copy := other / f"{original.stem}_other{original.suffix}")
        planted["conflicts"].append((original, copy))
    for _ in range(PLANTS["wrong_extension"]):
        original = next(picks)
        if original.suffix == ".png":
            original.rename(original.with_suffix(".jpg"))
            planted["wrong_extension"].append(original.with_suffix(".jpg"))
    return planted


def all_pairs(hashes: list[int], distance: int) -> set[tuple[int, int]]:
    values = np.asarray(hashes, dtype=np.uint64)
    found = set()
    for first in range(len(values) - 1):
        apart = near.popcount(values[first] ^ values[first + 1:])
        found.update((first, first + 1 + int(other)) for other in np.nonzero(apart <= distance)[0])
    return found


def search(hashes: list[int], distance: int) -> tuple[float, float, int]:
    """Seconds of the multi-index search and of all pairs, and the pairs (checked equal)."""
    started = time.perf_counter()
    indexed = {(first, second) for first, second, _apart in near.near_pairs(hashes, distance)}
    index_seconds = time.perf_counter() - started
    started = time.perf_counter()
    brute = all_pairs(hashes, distance)
    brute_seconds = time.perf_counter() - started
    assert indexed == brute, (len(indexed), len(brute))
    return index_seconds, brute_seconds, len(indexed)


def scaled(hashes: list[int], count: int, rng: random.Random) -> list[int]:
    values = set(hashes)
    while len(values) < count:
        value = rng.choice(hashes)
        for _ in range(rng.randrange(1, 9)):
            value ^= 1 << rng.randrange(64)
        values.add(value)
    return sorted(values)


def perceptual_hashes(root: Path, files: list[tuple[str, str, int]]) -> list[int]:
    """The distinct hashes the report compared (its own `images.examine`, once per content)."""
    first = {digest: path for path, digest, size in reversed(files) if size and is_image(path)}
    return sorted({value for path in first.values() if (value := images.examine(root, path).phash) is not None})


def found_share(report: dict, planted: dict[str, list], root: Path) -> str:
    def relative(path: Path) -> str:
        return path.relative_to(root).as_posix()

    groups = [set(group["paths"]) for group in report["exact_duplicates"] + report["near_duplicates"]]
    pairs = planted["exact"] + planted["near"] + planted["leaks"] + planted["conflicts"]
    found = sum(any({relative(a), relative(b)} <= group for group in groups) for a, b in pairs)
    corrupt = {entry["path"] for entry in report["corrupt"]}
    found += sum(relative(path) in corrupt for path in planted["truncated"])
    wrong = {entry["path"] for entry in report["wrong_extension"]}
    found += sum(relative(path) in wrong for path in planted["wrong_extension"])
    total = len(pairs) + len(planted["truncated"]) + len(planted["wrong_extension"])
    return f"{found}/{total}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--distance", type=int, default=6)
    parser.add_argument("--scale", type=int, default=0, help="also search this many hashes (made from the real ones)")
    options = parser.parse_args()
    rng = random.Random(2024)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="mlyard-cleaning-bench-") as folder:
        root = Path(folder)
        started = time.perf_counter()
        planted = generate(root, options.images, rng)
        console.print(f"{options.images:,} images written in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        files = walk(root)
        sha_seconds = time.perf_counter() - started
        stages: dict[str, float] = {}
        started = time.perf_counter()
        report = build_report(root, files, distance=options.distance,
                              progress=lambda stage, done, total: stages.__setitem__(stage, time.perf_counter()))
        report_seconds = time.perf_counter() - started
        hashing_seconds = stages["hashing"] - started
        hashes = perceptual_hashes(root, files)
        figures = [(len(hashes), *search(hashes, options.distance))]
        if options.scale:
            figures.append((options.scale, *search(scaled(hashes, options.scale, rng), options.distance)))
        found = found_share(report, planted, root)
    table = Table(title=f"Cleaning report of {report['images']:,} images, distance {options.distance}")
    for column in ("step", "seconds", "rate", "vs all pairs"):
        table.add_column(column, justify="left" if column == "step" else "right")
    table.add_row("sha256 of the files (the manifest)", f"{sha_seconds:.2f}",
                  f"{len(files) / sha_seconds:,.0f} files/s", "")
    table.add_row("report, whole", f"{report_seconds:.2f}", f"{report['images'] / report_seconds:,.0f} images/s", "")
    table.add_row("  of which decoding and hashing", f"{hashing_seconds:.2f}",
                  f"{report['images'] / hashing_seconds:,.0f} images/s", "")
    for count, index_seconds, brute_seconds, pairs in figures:
        table.add_row(f"near-duplicate search, {count:,} hashes ({pairs:,} pairs)", f"{index_seconds:.3f}", "",
                      f"{brute_seconds / index_seconds:.1f}× faster")
        table.add_row(f"  all pairs, {count:,} hashes", f"{brute_seconds:.3f}", "", "")
    console.print(table)
    console.print(f"summary: {report['summary']}")
    console.print(f"planted problems found: {found}")


if __name__ == "__main__":
    main()
