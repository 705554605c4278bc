"""Cleaning a dataset version through the real server and CLI: `mlyard datasets check` runs the
report as a job of the dataset's project, `report` shows it, and `clean` makes a child version
without what it found, whose own report is clean."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import RunningServer

from test_datasets import unique

pytestmark = pytest.mark.slow


def planted_digits(folder: Path) -> dict[str, list[str]]:
    """40 of scikit-learn's digits as 32×32 PNGs under train/<label>/ and test/<label>/, with one
    problem of each kind planted; returns the planted paths by kind."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    paths = []
    for index in range(40):
        split = "test" if index % 4 == 0 else "train"
        target = folder / split / str(digits.target[index]) / f"{index}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        pixels = (digits.images[index] * 255 / 16).astype("uint8")
        Image.fromarray(pixels, mode="L").resize((32, 32), Image.NEAREST).save(target)
        paths.append(target.relative_to(folder).as_posix())
    planted: dict[str, list[str]] = {}
    source = folder / paths[1]
    copy = source.with_name("copy-of-1.png")
    shutil.copyfile(source, copy)
    planted["duplicate"] = [copy.relative_to(folder).as_posix()]
    truncated = folder / paths[2]
    truncated.write_bytes(truncated.read_bytes()[:60])
    planted["corrupt"] = [paths[2]]
    wrong = (folder / paths[3]).with_suffix(".jpg")
    (folder / paths[3]).rename(wrong)
    planted["wrong_extension"] = [wrong.relative_to(folder).as_posix()]
    test_image = folder / paths[4]  # a test image, again in train: a leak
    leaked = folder / "train" / test_image.parent.name / "leaked-4.png"
    Image.open(test_image).convert("L").save(leaked, optimize=True)
    planted["leak"] = [paths[4], leaked.relative_to(folder).as_posix()]
    other = "7" if test_image.parent.name != "7" else "1"
    conflict = folder / "train" / other / "relabelled-5.png"
    conflict.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / paths[5], conflict)
    planted["conflict"] = [paths[5], conflict.relative_to(folder).as_posix()]
    return planted


def test_a_report_finds_the_planted_problems_and_clean_makes_a_clean_child(server: RunningServer,
                                                                           tmp_path: Path) -> None:
    name = unique("dirty-digits")
    planted = planted_digits(tmp_path / "digits")
    server.cli_json("datasets", "push", name, str(tmp_path / "digits"))

    shown = server.cli_json("datasets", "check", f"{name}:v1", "--wait", "--timeout", "300")
    assert shown["state"] == "done", shown
    report = shown["report"]
    assert any(planted["duplicate"][0] in group["paths"] for group in report["exact_duplicates"])
    assert [item["path"] for item in report["corrupt"]] == planted["corrupt"]
    assert [item["path"] for item in report["wrong_extension"]] == planted["wrong_extension"]
    assert any(sorted(pair["paths"]) == sorted(planted["leak"]) for pair in report["leaks"]), report["leaks"]
    assert any(set(planted["conflict"]) <= set(group["paths"]) for group in report["label_conflicts"])
    job = shown["job"]
    assert f"cleaning report {shown['id']} stored" in " ".join(
        event["message"] or "" for event in server.cli_json("show", str(job))["events"])
    assert server.cli_json("show", str(job))["spec"]["datasets"][0]["version"] == "v1"
    printed = server.cli("datasets", "report", f"{name}:v1", check=True).stdout
    assert "exact duplicates" in printed and planted["corrupt"][0] in printed

    # One file chosen by hand: the copy a kind would keep (the first of its group) goes, nothing else.
    kept = sorted(next(group["paths"] for group in report["exact_duplicates"]
                       if planted["duplicate"][0] in group["paths"]))[0]
    chosen = server.cli_json("datasets", "clean", f"{name}:v1", "--path", kept)
    removed = server.cli_json("datasets", "diff", name, "v1", chosen["version"]["version"])["removed"]
    assert [item["path"] for item in removed] == [kept], removed
    assert "chosen files" in chosen["version"]["message"]
    clean_file = next(path.relative_to(tmp_path / "digits").as_posix()
                      for path in (tmp_path / "digits").rglob("10.png"))  # a digit no problem touches
    unnamed = server.cli("datasets", "clean", f"{name}:v1", "--path", clean_file)
    assert unnamed.returncode == 1 and "is not a file this report names" in unnamed.stderr, unnamed.stderr

    cleaned = server.cli_json("datasets", "clean", f"{name}:v1", "--drop",
                              "duplicates,corrupt,wrong-extension,leaks,conflicts")
    assert cleaned["created"] and cleaned["version"]["parent"] == "v1"
    child = cleaned["version"]["version"]
    files = {item["path"] for item in server.cli_json("datasets", "diff", name, "v1", child)["removed"]}
    assert planted["duplicate"][0] in files and set(planted["corrupt"] + planted["wrong_extension"]) <= files
    assert planted["leak"][0] in files, "the held-out side of a leak goes"
    again = server.cli_json("datasets", "check", f"{name}:{child}", "--wait", "--timeout", "300")["report"]
    summary = again["summary"]
    assert (summary["exact_duplicates"], summary["corrupt"], summary["wrong_extension"], summary["leaks"],
            summary["label_conflicts"]) == (0, 0, 0, 0, 0), summary

    assert "nothing to drop" in server.cli("datasets", "clean", f"{name}:{child}", "--drop", "duplicates",
                                           check=True).stdout
    refused = server.cli("datasets", "clean", f"{name}:v1", "--drop", "everything")
    assert refused.returncode == 2 and "not one of" in refused.stderr and "Traceback" not in refused.stderr
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.txt").write_text("a\n")
    unchecked = unique("unchecked")
    server.cli_json("datasets", "push", unchecked, str(tmp_path / "one"))
    no_report = server.cli("datasets", "clean", f"{unchecked}:v1", "--drop", "duplicates")
    assert no_report.returncode == 1 and "has no finished cleaning report" in no_report.stderr, no_report.stderr


def test_predictions_from_another_dataset_rank_the_corrupted_labels(server: RunningServer, tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict

    digits = load_digits()
    count = 300
    labels = digits.target[:count].copy()
    rng = np.random.default_rng(7)
    corrupted = rng.choice(count, size=15, replace=False)  # 5% of the labels are wrong
    labels[corrupted] = (labels[corrupted] + rng.integers(1, 10, size=15)) % 10
    folder = tmp_path / "labelled"
    paths = []
    for index in range(count):
        target = folder / "train" / str(labels[index]) / f"{index}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray((digits.images[index] * 255 / 16).astype("uint8"), mode="L").save(target)
        paths.append(target.relative_to(folder).as_posix())
    probabilities = cross_val_predict(LogisticRegression(max_iter=2000), digits.data[:count], labels, cv=5,
                                      method="predict_proba")
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    rows = ["path," + ",".join(str(label) for label in range(10))]
    rows += [f"{path}," + ",".join(f"{value:.6f}" for value in row) for path, row in zip(paths, probabilities)]
    (predictions / "probabilities.csv").write_text("\n".join(rows) + "\n")
    name, preds = unique("labelled-digits"), unique("digit-predictions")
    server.cli_json("datasets", "push", name, str(folder))
    server.cli_json("datasets", "push", preds, str(predictions))

    shown = server.cli_json("datasets", "check", f"{name}:v1", "--distance", "2", "--predictions",
                            "probabilities.csv", "--predictions-from", f"{preds}:v1", "--wait", "--timeout", "300")
    assert shown["state"] == "done", shown
    flagged = {item["path"] for item in shown["report"]["label_issues"]}
    wrong = {paths[index] for index in corrupted}
    assert len(flagged & wrong) >= len(wrong) // 2, (sorted(flagged), sorted(wrong))
    inputs = server.cli_json("show", str(shown["job"]))["spec"]["datasets"]
    assert [(item["name"], item["path"]) for item in inputs] == [(name, "data"), (preds, "predictions")]

    missing = server.cli("datasets", "check", f"{name}:v1", "--predictions", "p.csv", "--predictions-from",
                         unique("nowhere"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    slipped = server.cli("datasets", "check", f"{name}:v1", "--predictions", "../../etc/passwd")
    assert slipped.returncode == 1 and "predictions.path" in slipped.stderr, slipped.stderr
