"""`mlyard sim` end to end: the table, the JSON file, load sweeps and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlyard.cli import main
from mlyard.scheduler import DEFAULT_POLICY
from mlyard.sim import load_trace, offered, rescale

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
    assert document["options"]["preemption_budget"] is None  # each policy's own
    assert document["options"]["predictions"] is False
    fifo, backfill = document["results"]
    assert (fifo["policy"], fifo["avg_jct"], fifo["jobs"]) == ("fifo", 140, 5)
    assert fifo["load"] == backfill["load"] == 1 and [point["load"] for point in document["loads"]] == [1]
    assert backfill["avg_jct"] == 66 and backfill["avg_jct_vs_fifo"] == pytest.approx(66 / 140)


def test_run_times_are_predicted_and_reported_and_handed_to_the_policy_when_asked(tmp_path: Path):
    trace = tmp_path / "reruns.csv"
    trace.write_text(ITP_HEADER + "\n" + "".join(f"j{n},{100 * n},100,1\n" for n in range(12)))
    for flag in ("--predictions", "--no-predictions"):
        out = tmp_path / f"{flag}.json"
        result = mlyard_sim("--trace", str(trace), "--format", "itp", "--gpus", "2", "--gpus-per-node", "2",
                            "--tenants", "none", "--tick", "10", flag, "--json", str(out))
        assert result.returncode == 0, result.stderr
        assert "jobs with a trusted prediction" in result.stdout
        document = json.loads(out.read_text())
        assert document["options"]["predictions"] is (flag == "--predictions")
        [metrics] = document["results"]
        assert metrics["predicted_share"] > 0.5 and metrics["prediction_error"] == 0.0  # every rerun runs 100 s


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
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--load", "0,abc"],
         "--load: '0' is not a positive number"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--load", "1,abc"], "--load: 'abc' is not a number"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--load=-0.5"],
         "--load: '-0.5' is not a positive number"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--load", "0.5,"], "--load: '' is not a number"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--load", ",".join(["1"] * 17)],
         "--load: at most 16 factors, not 17"),
        (["--trace", "{tiny}", "--format", "itp", "--gpus", "8", "--preemption-budget=-1"],
         "--preemption-budget must be 0 or more, not -1"),
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


def test_the_offered_load_is_gpu_time_over_cluster_time_and_scales_with_the_factor(tiny: Path):
    jobs = load_trace(tiny, "itp", tenants="none")
    # 2·100 + 4·50 + 1·30 + 2·20 + 1·10 = 480 GPU-seconds over 30 s of arrivals on 4 GPUs.
    assert offered(jobs, 4).offered_load == pytest.approx(4.0)
    faster = offered(jobs, 4, load=2)
    assert (faster.gpu_seconds, faster.arrival_span, faster.offered_load) == (480, 15, pytest.approx(8.0))
    assert offered(jobs, 4, load=0.5).offered_load == pytest.approx(2.0)
    assert [job.submitted_at for job in rescale(jobs, 2)] == [0, 0, 5, 10, 15]
    assert [job.duration for job in rescale(jobs, 2)] == [job.duration for job in jobs]
    with pytest.raises(ValueError, match="positive"):
        rescale(jobs, 0)


def test_a_load_sweep_gives_a_table_per_load_with_faster_arrivals_at_higher_load(tmp_path: Path, tiny: Path):
    out = tmp_path / "sweep.json"
    result = mlyard_sim("--trace", str(tiny), "--format", "itp", "--gpus", "4", "--gpus-per-node", "2",
                        "--policy", "fifo", "--tick", "10", "--load", "0.5,2", "--json", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum("metric" in line for line in lines) == 2
    slow = lines.index("load 0.5: offered load 2.00 = 0.133 GPU-h / (4 GPUs × 60 s of arrivals)")
    fast = lines.index("load 2: offered load 8.00 = 0.133 GPU-h / (4 GPUs × 15 s of arrivals)")
    assert slow < fast and "at load 0.5" in lines[slow + 1] and "at load 2" in lines[fast + 1]
    document = json.loads(out.read_text())
    assert [(point["load"], point["arrival_span"], point["offered_load"]) for point in document["loads"]] == [
        (0.5, 60, 2), (2, 15, 8)]
    at_half, at_double = document["results"]
    assert (at_half["load"], at_double["load"]) == (0.5, 2) and at_double["offered_load"] == 8
    # The same jobs arriving four times as fast wait longer for the same GPUs.
    assert at_double["avg_queueing"] > at_half["avg_queueing"]


def test_without_a_policy_the_servers_default_is_replayed_and_named(tmp_path: Path, tiny: Path, capsys,
                                                                       monkeypatch):
    out = tmp_path / "default.json"
    monkeypatch.setattr(sys, "argv", ["mlyard", "sim", "--trace", str(tiny), "--format", "itp", "--gpus", "4",
                                      "--gpus-per-node", "2", "--tick", "10", "--json", str(out)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None)
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"policy: {DEFAULT_POLICY} (the server's default)"
    assert [result["policy"] for result in json.loads(out.read_text())["results"]] == [DEFAULT_POLICY]
