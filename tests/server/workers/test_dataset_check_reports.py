"""What the leader keeps of a cleaning job's report: a regular file only (a link or a FIFO the
job's account left in its checkpoint directory is refused at once), of the known shape."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlyard.server.workers.dataset_checks import _read_regular, well_formed

REPORT = {"format": 1, "summary": {"corrupt": 1}, "exact_duplicates": [{"sha256": "a", "paths": ["x", "y"]}],
          "corrupt": [{"path": "z", "problem": "truncated"}], "empty": ["e"], "leaks": []}


def test_a_regular_report_is_read_up_to_its_bound(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    assert json.loads(_read_regular(tmp_path, "report.json", 1 << 20)) == REPORT
    assert len(_read_regular(tmp_path, "report.json", 10)) == 10


def test_a_link_or_a_fifo_in_its_place_is_refused_without_waiting(tmp_path: Path) -> None:
    secret = tmp_path / "another-jobs-report.json"
    secret.write_text(json.dumps(REPORT))
    job = tmp_path / "job"
    job.mkdir()
    (job / "report.json").symlink_to(secret)
    with pytest.raises(OSError):
        _read_regular(job, "report.json", 1 << 20)
    (job / "report.json").unlink()
    os.mkfifo(job / "report.json")  # opened without O_NONBLOCK, it would wait for a writer forever
    with pytest.raises(OSError, match="not a regular file"):
        _read_regular(job, "report.json", 1 << 20)
    linked_folder = tmp_path / "linked"
    linked_folder.symlink_to(tmp_path)
    with pytest.raises(OSError):
        _read_regular(linked_folder, "another-jobs-report.json", 1 << 20)


@pytest.mark.parametrize("report", [
    [], {"format": 2, "summary": {}}, {"format": 1}, {"format": 1, "summary": {}, "corrupt": ["not a dict"]},
    {"format": 1, "summary": {}, "exact_duplicates": [{"paths": "x"}]},
    {"format": 1, "summary": {}, "leaks": [{"paths": ["a", 3]}]}, {"format": 1, "summary": {}, "empty": [None]},
])
def test_a_report_of_another_shape_is_not_kept(report: object) -> None:
    assert not well_formed(report)
    assert well_formed(REPORT)
