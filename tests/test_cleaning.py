"""Cleaning reports (`mlyard.cleaning`): a version of scikit-learn's digits as PNG files with
planted problems (copies, near copies, truncated files, wrong extensions, copies under another
class, near copies across train and test) is reported with every one of them and few clean files;
label issues from cross-validated predictions; the command end to end; hostile files."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mlyard.cleaning import CleaningError, near
from mlyard.cleaning.files import walk
from mlyard.cleaning.images import FORMATS
from mlyard.cleaning.labels import IMAGE_EXTENSIONS, file_labels, match_rows, split_of
from mlyard.cleaning.report import build_report

SIZE = 32  # the 8×8 digits upscaled: a perceptual hash of 8×8 pixels says little
# Digits are alike: at 6 bits a fifth of the distinct digits have a neighbour, at 2 under 1%
# (see docs/architecture.md, "Cleaning reports"); the planted near copies all lie within 2.
DIGITS_DISTANCE = 2


def digit_image(pixels: Any) -> Image.Image:
    return Image.fromarray((pixels * 255 / 16).astype("uint8"), mode="L").resize((SIZE, SIZE), Image.BICUBIC)


def write_digits(folder: Path) -> dict[int, Path]:
    """train/<label>/<n>.png and test/<label>/<n>.png, a quarter in test."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    written = {}
    for index, (pixels, target) in enumerate(zip(digits.images, digits.target)):
        path = folder / ("test" if index % 4 == 0 else "train") / str(target) / f"{index}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        digit_image(pixels).save(path)
        written[index] = path
    return written


@dataclass
class Planted:
    root: Path
    originals: dict[int, Path]
    exact: list[tuple[str, str]] = field(default_factory=list)
    near: list[tuple[str, str]] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    wrong_extension: list[str] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    leaks: list[tuple[str, str]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def pair(self, original: Path, copy: Path, into: list[tuple[str, str]]) -> None:
        into.append((self.relative(original), self.relative(copy)))
        self.touched |= {self.relative(original), self.relative(copy)}


def near_copy(image: Image.Image, kind: int, rng: random.Random) -> tuple[bytes, str]:
    """The same digit re-encoded as JPEG, resized, or with one pixel changed."""
    out = io.BytesIO()
    if kind == 0:
        image.convert("L").save(out, "JPEG", quality=90)
        return out.getvalue(), ".jpg"
    if kind == 1:
        image.resize((SIZE * 3 // 4, SIZE * 3 // 4), Image.BILINEAR).save(out, "PNG")
        return out.getvalue(), ".png"
    changed = image.copy()
    x, y = rng.randrange(SIZE), rng.randrange(SIZE)
    changed.putpixel((x, y), 255 - changed.getpixel((x, y)))
    changed.save(out, "PNG")
    return out.getvalue(), ".png"


def plant(root: Path) -> Planted:
    planted = Planted(root, write_digits(root))
    rng = random.Random(7)
    train = [index for index in planted.originals if index % 4]
    picks = iter(rng.sample(train, 63))
    for _ in range(20):
        original = planted.originals[next(picks)]
        shutil.copy(original, copy := original.with_name(f"{original.stem}_copy.png"))
        planted.pair(original, copy, planted.exact)
    for number in range(15):
        original = planted.originals[next(picks)]
        content, extension = near_copy(Image.open(original), number % 3, rng)
        (copy := original.with_name(f"{original.stem}_near{extension}")).write_bytes(content)
        planted.pair(original, copy, planted.near)
    for _ in range(10):
        original = planted.originals[next(picks)]
        original.write_bytes(original.read_bytes()[: original.stat().st_size // 2])
        planted.truncated.append(planted.relative(original))
    for _ in range(5):
        original = planted.originals[next(picks)]
        original.rename(renamed := original.with_suffix(".jpg"))
        planted.wrong_extension.append(planted.relative(renamed))
    for _ in range(8):
        original = planted.originals[next(picks)]
        other = original.parents[1] / str((int(original.parent.name) + 1) % 10)
        shutil.copy(original, copy := other / f"{original.stem}_other.png")
        planted.pair(original, copy, planted.conflicts)
    for number in range(5):
        original = planted.originals[next(picks)]
        content, extension = near_copy(Image.open(original), number % 2, rng)
        leak = root / "test" / original.parent.name / f"{original.stem}_leak{extension}"
        leak.write_bytes(content)
        planted.pair(original, leak, planted.leaks)
    planted.touched |= set(planted.truncated) | set(planted.wrong_extension)
    planted.touched |= {path.replace(".jpg", ".png") for path in planted.wrong_extension}
    return planted


@pytest.fixture(scope="module")
def digits_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Planted, dict[str, Any], list[tuple]]:
    planted = plant(tmp_path_factory.mktemp("digits"))
    progress: list[tuple] = []
    report = build_report(planted.root, walk(planted.root), distance=DIGITS_DISTANCE,
                          progress=lambda *step: progress.append(step))
    json.dumps(report)  # what the server stores
    return planted, report, progress


def flagged_paths(report: dict[str, Any]) -> set[str]:
    paths = {path for key in ("exact_duplicates", "near_duplicates", "leaks", "label_conflicts")
             for entry in report[key] for path in entry["paths"]}
    return paths | {entry["path"] for key in ("corrupt", "wrong_extension") for entry in report[key]} | set(
        report["empty"])


def test_the_report_finds_every_planted_problem(digits_report: tuple) -> None:
    planted, report, _progress = digits_report
    exact = [set(group["paths"]) for group in report["exact_duplicates"]]
    assert all({original, copy} in exact for original, copy in planted.exact + planted.conflicts)
    near_groups = [set(group["paths"]) for group in report["near_duplicates"]]
    for original, copy in planted.near + planted.leaks:
        assert any({original, copy} <= group for group in near_groups), (original, copy)
    leaks = [entry["paths"] for entry in report["leaks"]]
    assert all(sorted(pair) in leaks for pair in planted.leaks), leaks
    assert all(entry["leak"] for entry in report["near_duplicates"]
               if any(pair[1] in entry["paths"] for pair in planted.leaks))
    assert {entry["path"] for entry in report["corrupt"]} == set(planted.truncated)
    assert all(entry["problem"].startswith("cannot be decoded: ") for entry in report["corrupt"])
    assert report["wrong_extension"] == [{"path": path, "extension": ".jpg", "format": "PNG"}
                                         for path in sorted(planted.wrong_extension)]
    conflicts = [set(conflict["paths"]) for conflict in report["label_conflicts"]]
    assert all(any({original, copy} <= group for group in conflicts) for original, copy in planted.conflicts)


def test_few_clean_files_are_flagged(digits_report: tuple) -> None:
    planted, report, _progress = digits_report
    clean = {planted.relative(path) for path in planted.originals.values()} - planted.touched
    false_positives = flagged_paths(report) & clean
    assert len(false_positives) <= 0.02 * len(clean), sorted(false_positives)


def test_the_report_holds_its_keys_and_counts(digits_report: tuple) -> None:
    planted, report, progress = digits_report
    assert list(report) == ["format", "files", "images", "distance", "labels_source", "exact_duplicates",
                            "near_duplicates", "leaks", "corrupt", "empty", "wrong_extension",
                            "label_conflicts", "class_balance", "label_issues", "summary"]
    assert report["format"] == 1 and report["distance"] == DIGITS_DISTANCE and report["label_issues"] is None
    assert report["files"] == report["images"] == 1797 + 20 + 15 + 8 + 5
    assert report["labels_source"] == "image folders" and len(report["class_balance"]) == 10
    assert list(report["class_balance"].values()) == sorted(report["class_balance"].values(), reverse=True)
    summary = report["summary"]
    assert summary["exact_duplicates"] == len(report["exact_duplicates"]) >= 28
    assert summary["duplicate_files"] == sum(len(group["paths"]) - 1 for group in report["exact_duplicates"])
    assert summary["corrupt"] == 10 and summary["wrong_extension"] == 5 and summary["label_issues"] is None
    for key in ("exact_duplicates", "near_duplicates", "label_conflicts"):
        firsts = [entry["paths"][0] for entry in report[key]]
        assert firsts == sorted(firsts) and all(entry["paths"] == sorted(entry["paths"]) for entry in report[key])
    stages = {stage for stage, _done, _total in progress}
    assert {"hashing", "searching"} <= stages
    assert ("hashing", report["images"] - 20 - 8, report["images"] - 20 - 8) in progress  # copies once


def test_cross_validated_predictions_find_corrupted_labels(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict

    digits = load_digits()
    rng = random.Random(11)
    labels = [str(target) for target in digits.target]
    corrupted = set(rng.sample(range(len(labels)), len(labels) // 20))
    for index in corrupted:
        labels[index] = str((int(labels[index]) + rng.randrange(1, 10)) % 10)
    (tmp_path / "images").mkdir()
    for index, pixels in enumerate(digits.images):
        digit_image(pixels).save(tmp_path / "images" / f"{index}.png")
    rows = "".join(f"images/{index}.png,{label}\n" for index, label in enumerate(labels))
    (tmp_path / "labels.csv").write_text("filename,label\n" + rows)
    model = LogisticRegression(max_iter=2000)
    probabilities = cross_val_predict(model, digits.data / 16, labels, cv=5, method="predict_proba")
    classes = sorted(set(labels))  # the order of `model.classes_`
    table = "path," + ",".join(classes) + "\n" + "".join(
        f"images/{index}.png," + ",".join(f"{value:.6f}" for value in row) + "\n"
        for index, row in enumerate(probabilities))
    (predictions := tmp_path / "predictions.csv").write_text(table)
    report = build_report(tmp_path, walk(tmp_path), predictions=predictions)
    assert report["labels_source"] == "table labels.csv" and sum(report["class_balance"].values()) == 1797
    flagged = {issue["path"] for issue in report["label_issues"]}
    found = {f"images/{index}.png" for index in corrupted} & flagged
    assert len(found) >= 0.8 * len(corrupted), (len(found), len(corrupted), len(flagged))
    assert report["summary"]["label_issues"] == len(report["label_issues"]) < 3 * len(corrupted)
    qualities = [issue["quality"] for issue in report["label_issues"]]
    assert qualities == sorted(qualities)  # most likely first
    first = report["label_issues"][0]
    assert first["suggested"] != first["label"] and first["label"] == labels[int(first["path"][7:-4])]


def test_bad_predictions_are_one_clear_error(tmp_path: Path) -> None:
    folder = small_folder(tmp_path / "v")
    files = walk(folder)
    for content, words in (("file,0,1\n", "no `path` column"), ("path,cat\n", "two classes"),
                           ("path,cat,dog\ntrain/cat/0.png,x,1\n", "line 2"),
                           ("path,cat,dog\nelsewhere.png,0.5,0.5\n", "no row names a labelled file")):
        (predictions := tmp_path / "p.csv").write_text(content)
        with pytest.raises(CleaningError, match=words):
            build_report(folder, files, predictions=predictions)


def small_folder(folder: Path) -> Path:
    """Two classes of noise images, a copy across splits, a truncated file and an empty one."""
    rng = random.Random(5)
    for index in range(6):
        path = folder / "train" / ("cat" if index % 2 else "dog") / f"{index}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.frombytes("L", (16, 16), bytes(rng.randrange(256) for _ in range(256))).resize((48, 48)).save(path)
    (folder / "test" / "cat").mkdir(parents=True)
    shutil.copy(folder / "train/cat/1.png", folder / "test/cat/copy.png")
    (folder / "train/dog/cut.png").write_bytes((folder / "train/dog/2.png").read_bytes()[:100])
    (folder / "notes.txt").write_bytes(b"")
    return folder


def manifest_of(folder: Path) -> dict[str, Any]:
    return {"files": [{"path": path.relative_to(folder).as_posix(), "size": path.stat().st_size,
                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
                      for path in sorted(folder.rglob("*")) if path.is_file()]}


def run_cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlyard.cleaning", *arguments], capture_output=True,
                          text=True, timeout=120)


def test_the_command_reports_a_folder(tmp_path: Path) -> None:
    folder = small_folder(tmp_path / "v")
    (manifest := tmp_path / "manifest.json").write_text(json.dumps(manifest_of(folder)))
    done = run_cli(str(folder), "--files", str(manifest), "--report", str(tmp_path / "report.json"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "hashing 7/7" in lines  # 8 images, the copy decoded once
    summary = json.loads(lines[-1].removeprefix("summary "))
    report = json.loads((tmp_path / "report.json").read_text())
    assert summary == report["summary"] and [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []
    assert report["leaks"] == [{"paths": ["test/cat/copy.png", "train/cat/1.png"], "distance": 0}]
    assert report["corrupt"][0]["path"] == "train/dog/cut.png" and report["empty"] == ["notes.txt"]
    (tmp_path / "data").symlink_to(folder)  # a job sees its dataset through a link
    walked = run_cli(str(tmp_path / "data"), "--report", str(tmp_path / "walked.json"), "--distance", "4")
    assert walked.returncode == 0, walked.stderr
    assert "reading 9/9" in walked.stdout.splitlines()
    again = json.loads((tmp_path / "walked.json").read_text())
    assert again["distance"] == 4 and again["exact_duplicates"] == report["exact_duplicates"]


@pytest.mark.parametrize(("arguments", "words"), [
    (["--files", "{tmp}/nothing.json"], "nothing.json"),
    (["--files", "{tmp}/broken.json"], "not JSON"),
    (["--files", "{tmp}/escape.json"], "not a relative path"),
    (["--distance", "70"], "0 to 64"),
    ([], "--report"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path: Path, arguments: list[str], words: str) -> None:
    folder = small_folder(tmp_path / "v")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "escape.json").write_text(json.dumps({"files": [{"path": "../etc/passwd", "size": 1,
                                                                 "sha256": "0" * 64}]}))
    report = [] if words == "--report" else ["--report", str(tmp_path / "r.json")]
    done = run_cli(str(folder), *report, *[argument.format(tmp=tmp_path) for argument in arguments])
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert words in done.stderr and not (tmp_path / "r.json").exists()


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares `width`×`height` pixels and holds a few bytes of them."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(
        b"IEND", b"")


def test_hostile_files_give_a_report(tmp_path: Path) -> None:
    folder = small_folder(tmp_path / "v")
    (folder / "labels.csv").write_bytes(b"\x89\0\xff\xfe garbage\0\n" + bytes(range(256)))
    (folder / "train/cat/bomb.png").write_bytes(png_header(100_000, 100_000))
    (folder / "train/cat/big.png").write_bytes(png_header(10_000, 10_000))
    odd = "train/dog/we\nird 'na\"me' \\ ☃ %s.png"
    shutil.copy(folder / "train/dog/0.png", folder / odd)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(folder / "train/dog/4.png", outside / "x.png")
    (folder / "train/cat/link.png").symlink_to(outside / "x.png")
    (folder / "linked").symlink_to(outside)
    files = [(path, digest, size) for path, digest, size in walk(folder)]
    digest = hashlib.sha256((outside / "x.png").read_bytes()).hexdigest()
    files += [("train/cat/link.png", digest, 10), ("linked/x.png", digest, 10)]  # a manifest that lies
    report = build_report(folder, files)
    json.dumps(report)
    problems = {entry["path"]: entry["problem"] for entry in report["corrupt"]}
    assert report["labels_source"] == "image folders" and odd not in problems
    assert "DecompressionBomb" in problems["train/cat/bomb.png"]
    assert problems["train/cat/big.png"].startswith("not decoded: declares 10000×10000 pixels")
    assert problems["train/cat/link.png"].startswith("cannot be read")
    assert problems["linked/x.png"].startswith("cannot be read")
    assert ["train/dog/0.png", odd] in [group["paths"] for group in report["exact_duplicates"]]
    assert "linked/x.png" not in {path for group in report["near_duplicates"] for path in group["paths"]}


def test_file_labels_from_a_table_or_image_folders() -> None:
    paths = ["labels.csv", "images/a.png", "images/b.png", "c.png", "train/cat/1.png", "train/dog/2.png"]
    tables = {"labels.csv": b"Image,Class\n./images/a.png,cat\nimages\\b.png,dog\nmissing.png,cat\nc.png,\n"}
    assert file_labels(paths, tables.get) == ("table labels.csv", {"images/a.png": "cat", "images/b.png": "dog"})
    assert file_labels(paths, {"labels.csv": b"x,y\n1,2\n"}.get) == ("image folders", {
        "images/a.png": "images", "images/b.png": "images", "train/cat/1.png": "cat", "train/dog/2.png": "dog"})
    assert file_labels(paths, {"labels.csv": b"path,label\nnowhere.png,cat\n"}.get)[0] == "image folders"
    broken = b"path,label\nc.png,cat\n" + b"x" * 200_000 + b",dog\n"  # a field past csv's limit, midway
    assert file_labels(paths, {"labels.csv": broken}.get)[0] == "image folders"
    assert file_labels(["photos/a.png", "photos/b.png", "train/a.png"], {}.get) == (None, {})
    assert match_rows([("a.png", "cat"), ("b/c.png", "dog"), ("/etc/x", "cat"), ("a.png", "dog")],
                      {"meta/a.png", "meta/b/c.png", "a.png"}, "meta") == {"a.png": "cat", "meta/b/c.png": "dog"}


def test_split_of() -> None:
    assert [split_of(path) for path in ("Train/cat/1.png", "test/x.png", "validation/a/b/c", "train",
                                        "cats/1.png", "testing")] == ["train", "test", "validation", None, None, None]


def test_every_image_extension_names_its_formats() -> None:
    assert IMAGE_EXTENSIONS == set(FORMATS)


@pytest.mark.parametrize("distance", [0, 3, 6, 10])
def test_near_pairs_are_all_pairs_within_the_distance(distance: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(near, "BLOCK", 50)  # many blocks
    rng = random.Random(distance)
    seeds = [rng.getrandbits(64) for _ in range(40)]
    values = set(seeds)
    while len(values) < 400:
        value = rng.choice(seeds)
        for _ in range(rng.randrange(12)):
            value ^= 1 << rng.randrange(64)
        values.add(value)
    hashes = sorted(values)
    expected = [(first, second, (hashes[first] ^ hashes[second]).bit_count()) for first in range(len(hashes))
                for second in range(first + 1, len(hashes)) if (hashes[first] ^ hashes[second]).bit_count() <= distance]
    assert sorted(near.near_pairs(hashes, distance)) == expected


def test_a_distance_that_joins_everything_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(near, "MAX_PAIRS", 100)
    hashes = [1 << bit for bit in range(64)]  # every two are 2 bits apart
    assert len(near.near_pairs(hashes, 1)) == 0
    with pytest.raises(CleaningError, match="smaller distance"):
        near.near_pairs(hashes, 2)


def test_a_missing_extra_names_its_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = small_folder(tmp_path / "v")
    monkeypatch.setitem(sys.modules, "imagehash", None)
    with pytest.raises(CleaningError, match=r"pip install 'mlyard\[cleaning\]'"):
        build_report(folder, walk(folder))
