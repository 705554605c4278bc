"""`mlyard sim` end to end: the table, the JSON file and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlyard.cli import main

MLYARD = str(Path(sys.executable).parent / "mlyard")
ITP_HEADER = "job_id,submission_time,duration,num_gpu"
TINY = f"{ITP_HEADER}\na,0,100,2\nb,0,50,4\nc,10,30,1\nd,20,20,2\ne,30,10,1\n"


def mlyard_sim(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MLYARD, "sim", *arguments], capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(TINY)
    return path


def test_two_policies_side_by_side_and_a_json_file(tmp_path: Path, tiny: Path):
    out = tmp_path / "result.json"
    result = mlyard_sim("--trace", str(tiny), "--format", "itp", "--gpus", "4", "--gpus-per-node", "2",
                        "--policy", "fifo", "--policy", "backfill", "--tick", "10", "--json", str(out))
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if "metric" in line)
    assert "fifo" in header and "backfill" in header and header.index("fifo") < header.index("backfill")
    assert "avg JCT / fifo" in result.stdout and "2.3 min" in result.stdout  # FIFO's avg JCT: 140 s
    document = json.loads(out.read_text())
    assert document["cluster_gpus"] == 4 and document["nodes"] == 2 and document["options"]["tick"] == 10
    fifo, backfill = document["results"]
    assert (fifo["policy"], fifo["avg_jct"], fifo["jobs"]) == ("fifo", 140, 5)
    assert backfill["avg_jct"] == 66 and backfill["avg_jct_vs_fifo"] == pytest.approx(66 / 140)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--trace", "{missing}", "--format", "itp", "--gpus", "8", "--policy", "fifo"], "does not exist"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--policy", "sjf"], "unknown policy 'sjf'"),
        (["--trace", "{tiny}", "--format", "csv", "--gpus", "8", "--policy", "fifo"], "unknown trace format 'csv'"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "12", "--policy", "fifo"],
         "--gpus 12 is not a multiple of --gpus-per-node 8"),
        (["--trace", "{bad}", "--format", "itp", "--gpus", "8", "--policy", "fifo"],
         "bad.csv line 3: duration 'soon' is not a number"),
        (["--trace", "{tiny}", "--format", "philly", "--gpus", "8", "--policy", "fifo"],
         "tiny.csv line 1: header lacks column 'timestamp'"),
        (["--trace", "{tiny}", "--format", "itp", "--policy", "fifo"], "--gpus is required for itp traces"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8"], "give at least one --policy"),
        (["--format", "itp", "--gpus", "8", "--policy", "fifo"], "--trace is required"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--policy", "fifo", "--tenants", "vc"],
         "--tenants vc needs a trace with that column"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--policy", "fifo", "--quotas", "some"],
         "--quotas must be one of none, equal"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--policy", "fifo", "--tick", "0"],
         "tick must be > 0"),
    ],
)
def test_bad_input_is_one_line_and_a_failing_exit_code(tmp_path: Path, tiny: Path, capsys, monkeypatch,
                                                       arguments, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{ITP_HEADER}\na,0,5,1\nb,1,soon,1\n")
    paths = {"tiny": tiny, "bad": bad, "missing": tmp_path / "missing.csv"}
    # In-process through the same main() the `mlyard` script runs, to keep the matrix fast.
    monkeypatch.setattr(sys, "argv", ["mlyard", "sim", *(argument.format(**paths) for argument in arguments)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code not in (0, None)
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    assert captured.err.startswith("error: ") and message in captured.err
    assert captured.out == ""


def test_the_installed_command_reports_a_malformed_trace_in_one_line(tmp_path: Path):
    bad = tmp_path / "philly.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,abc,1,66.0,vc\n")
    result = mlyard_sim("--trace", str(bad), "--format", "philly", "--gpus", "8", "--policy", "fifo")
    assert result.returncode == 2
    assert result.stderr == "error: philly.csv line 2: duration 'abc' is not a number\n"
