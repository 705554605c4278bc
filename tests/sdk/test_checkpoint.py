"""The checkpoint SDK a job uses to resume: atomic saves, pruning, and reading the newest back."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from mlyard.sdk import checkpoint


@pytest.fixture(autouse=True)
def _no_job_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests decide what a job's environment says."""
    for name in ("MLYARD_CHECKPOINT_DIR", "MLYARD_RESTART_COUNT", "RANK"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import torch` fails, as in an environment where it is not installed."""
    monkeypatch.setitem(sys.modules, "torch", None)


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def trained_state() -> dict:
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 4,
            "rng": torch.get_rng_state()}


# --------------------------------------------------------------------------- round trips


def test_tensors_state_dicts_and_optimizer_state_round_trip(tmp_path: Path) -> None:
    state = trained_state()
    path = checkpoint.save(state, 1234, directory=tmp_path)

    assert path == tmp_path / "checkpoint-000000001234.pt"
    assert names(tmp_path) == ["checkpoint-000000001234.pt"]
    loaded, step = checkpoint.load_latest(directory=tmp_path)
    assert step == 1234
    assert loaded["epoch"] == 4
    assert torch.equal(loaded["rng"], state["rng"])
    for key, tensor in state["model"].items():
        assert torch.equal(loaded["model"][key], tensor)
    model = nn.Linear(3, 2)
    model.load_state_dict(loaded["model"])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    optimizer.load_state_dict(loaded["optimizer"])
    assert optimizer.state_dict()["state"][0]["step"] == 1
    # An ordinary torch.save file: usable without the SDK.
    assert torch.load(path, weights_only=False)["epoch"] == 4


def test_map_location_is_passed_to_torch(tmp_path: Path) -> None:
    checkpoint.save({"weights": torch.ones(2)}, 1, directory=tmp_path)
    loaded, _ = checkpoint.load_latest(directory=tmp_path, map_location=torch.device("meta"))
    assert loaded["weights"].device.type == "meta"


def test_plain_python_round_trips_with_pickle_where_torch_is_missing(tmp_path: Path, without_torch: None) -> None:
    state = {"epoch": 3, "history": [0.5, 0.25], "name": "run", "nested": {"ok": True}, "none": None}
    path = checkpoint.save(state, 3, directory=tmp_path)

    assert path == tmp_path / "checkpoint-000000000003.pkl"
    with open(path, "rb") as handle:
        assert pickle.load(handle) == state
    assert checkpoint.load_latest(directory=tmp_path) == (state, 3)
    assert checkpoint.latest_step(directory=tmp_path) == 3


def test_a_pickled_checkpoint_is_read_back_where_torch_is_installed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "torch", None)
        checkpoint.save({"epoch": 1}, 1, directory=tmp_path)
    checkpoint.save({"epoch": 2, "weights": torch.zeros(1)}, 2, directory=tmp_path)
    assert names(tmp_path) == ["checkpoint-000000000001.pkl", "checkpoint-000000000002.pt"]

    state, step = checkpoint.load_latest(directory=tmp_path)
    assert (state["epoch"], step) == (2, 2)
    (tmp_path / "checkpoint-000000000002.pt").unlink()
    assert checkpoint.load_latest(directory=tmp_path) == ({"epoch": 1}, 1)


def test_nothing_saved_yet_is_none(tmp_path: Path) -> None:
    assert checkpoint.load_latest(directory=tmp_path / "missing") is None
    assert checkpoint.latest_step(directory=tmp_path / "missing") is None
    assert checkpoint.load_latest(directory=tmp_path) is None


def test_the_newest_step_wins_whatever_the_order_of_saving(tmp_path: Path) -> None:
    for step in (5, 100, 20):
        checkpoint.save({"step": step}, step, directory=tmp_path, keep=5)
    assert checkpoint.latest_step(directory=tmp_path) == 100
    assert checkpoint.load_latest(directory=tmp_path) == ({"step": 100}, 100)


# --------------------------------------------------------------------------- pruning


def test_only_the_newest_keep_checkpoints_remain(tmp_path: Path) -> None:
    for step in range(1, 6):
        checkpoint.save({"step": step}, step, directory=tmp_path, keep=2)
    assert names(tmp_path) == ["checkpoint-000000000004.pt", "checkpoint-000000000005.pt"]

    for step in range(6, 10):
        checkpoint.save({"step": step}, step, directory=tmp_path)
    assert names(tmp_path) == [f"checkpoint-00000000000{step}.pt" for step in (7, 8, 9)]


def test_pruning_leaves_other_files_alone(tmp_path: Path) -> None:
    (tmp_path / "final.pt").write_bytes(b"the example's own file")
    (tmp_path / "notes.txt").write_text("mine")
    for step in range(4):
        checkpoint.save({"step": step}, step, directory=tmp_path, keep=1)
    assert names(tmp_path) == ["checkpoint-000000000003.pt", "final.pt", "notes.txt"]


def test_the_checkpoint_just_written_is_kept_even_below_older_steps(tmp_path: Path) -> None:
    for step in (10, 11):
        checkpoint.save({"step": step}, step, directory=tmp_path, keep=2)
    path = checkpoint.save({"step": 1}, 1, directory=tmp_path, keep=2)
    assert path is not None and path.exists()
    assert names(tmp_path) == ["checkpoint-000000000001.pt", "checkpoint-000000000011.pt"]


# --------------------------------------------------------------------------- crashes


def test_a_temporary_file_left_by_a_killed_save_is_never_read(tmp_path: Path) -> None:
    checkpoint.save({"step": 1}, 1, directory=tmp_path)
    # What a replica killed halfway through saving step 2 leaves behind.
    complete = tmp_path / "complete"
    checkpoint.save({"step": 2, "weights": torch.ones(1000)}, 2, directory=complete)
    half = (complete / "checkpoint-000000000002.pt").read_bytes()[:2000]
    temporary = tmp_path / ".checkpoint-000000000002.pt.0123456789abcdef.tmp"
    temporary.write_bytes(half)

    assert checkpoint.latest_step(directory=tmp_path) == 1
    assert checkpoint.load_latest(directory=tmp_path) == ({"step": 1}, 1)


def test_later_saves_remove_stale_temporary_files_but_not_fresh_ones(tmp_path: Path) -> None:
    stale = tmp_path / ".checkpoint-000000000002.pt.00000000000000aa.tmp"
    fresh = tmp_path / ".checkpoint-000000000002.pt.00000000000000bb.tmp"  # another rank writing now
    for path in (stale, fresh):
        path.write_bytes(b"PK\x03\x04 half of a checkpoint")
    long_ago = time.time() - checkpoint.STALE_TEMPORARY_SECONDS - 10
    os.utime(stale, (long_ago, long_ago))

    checkpoint.save({"step": 3}, 3, directory=tmp_path)
    assert names(tmp_path) == [fresh.name, "checkpoint-000000000003.pt"]


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint.save({"step": 1, "weights": torch.zeros(100)}, 1, directory=tmp_path)
    newest = checkpoint.save({"step": 2, "weights": torch.ones(100)}, 2, directory=tmp_path)
    with open(newest, "r+b") as handle:
        handle.truncate(newest.stat().st_size // 2)

    assert checkpoint.latest_step(directory=tmp_path) == 1
    state, step = checkpoint.load_latest(directory=tmp_path)
    assert (state["step"], step) == (1, 1)
    assert torch.equal(state["weights"], torch.zeros(100))
    warning = capsys.readouterr().err
    assert newest.name in warning and "older checkpoint" in warning


def test_a_truncated_pickle_falls_back_too(tmp_path: Path, without_torch: None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint.save({"step": 1}, 1, directory=tmp_path)
    newest = checkpoint.save({"step": 2, "payload": "x" * 1000}, 2, directory=tmp_path)
    newest.write_bytes(newest.read_bytes()[:-10])

    assert checkpoint.load_latest(directory=tmp_path) == ({"step": 1}, 1)
    assert newest.name in capsys.readouterr().err


def test_a_checkpoint_that_looks_complete_but_does_not_load_falls_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint.save({"step": 1}, 1, directory=tmp_path)
    with zipfile.ZipFile(tmp_path / "checkpoint-000000000002.pt", "w") as archive:
        archive.writestr("not-a-torch-file.txt", "hello")

    assert checkpoint.load_latest(directory=tmp_path) == ({"step": 1}, 1)
    assert "checkpoint-000000000002.pt could not be read" in capsys.readouterr().err


def test_only_truncated_checkpoints_mean_starting_afresh(tmp_path: Path) -> None:
    path = checkpoint.save({"step": 1}, 1, directory=tmp_path)
    path.write_bytes(path.read_bytes()[:10])
    assert checkpoint.load_latest(directory=tmp_path) is None
    assert checkpoint.latest_step(directory=tmp_path) is None


def test_checkpoints_that_exist_but_cannot_be_read_are_an_error_not_a_fresh_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint.save({"step": 1}, 1, directory=tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)  # a .pt checkpoint, but torch is gone
    with pytest.raises(checkpoint.CheckpointError, match="could be read"):
        checkpoint.load_latest(directory=tmp_path)


def test_a_save_that_fails_leaves_no_temporary_file_and_the_previous_checkpoint(tmp_path: Path) -> None:
    checkpoint.save({"step": 1}, 1, directory=tmp_path)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        checkpoint.save({"step": 2, "unpicklable": lambda: None}, 2, directory=tmp_path)
    assert names(tmp_path) == ["checkpoint-000000000001.pt"]
    assert checkpoint.load_latest(directory=tmp_path) == ({"step": 1}, 1)


# --------------------------------------------------------------------------- ranks and directories


def test_only_rank_zero_writes_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    assert checkpoint.save({"step": 1}, 1, directory=tmp_path / "ckpt") is None
    assert not (tmp_path / "ckpt").exists()

    path = checkpoint.save({"step": 1}, 1, directory=tmp_path / "ckpt", all_ranks=True)
    assert path == tmp_path / "ckpt" / "checkpoint-000000000001.pt"

    monkeypatch.setenv("RANK", "0")
    assert checkpoint.save({"step": 2}, 2, directory=tmp_path / "ckpt") is not None


def test_the_directory_comes_from_the_job_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job_directory = tmp_path / "home" / "checkpoints" / "42"
    monkeypatch.setenv("MLYARD_CHECKPOINT_DIR", str(job_directory))
    monkeypatch.chdir(tmp_path)

    assert checkpoint.save({"epoch": 1}, 1) == job_directory / "checkpoint-000000000001.pt"
    assert checkpoint.load_latest() == ({"epoch": 1}, 1)
    assert checkpoint.latest_step() == 1
    assert not (tmp_path / "checkpoints").exists()


def test_without_the_variable_checkpoints_go_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    checkpoint.save({"epoch": 1}, 1)
    assert names(tmp_path / "checkpoints") == ["checkpoint-000000000001.pt"]
    assert checkpoint.load_latest() == ({"epoch": 1}, 1)


# --------------------------------------------------------------------------- arguments and environment


@pytest.mark.parametrize("step", [-1, 1.5, "3", None, True, torch.tensor([1, 2])])
def test_a_step_that_is_not_a_non_negative_integer_is_refused(tmp_path: Path, step: object) -> None:
    with pytest.raises(ValueError, match="step"):
        checkpoint.save({}, step, directory=tmp_path)  # type: ignore[arg-type]
    assert not tmp_path.joinpath("checkpoints").exists() and names(tmp_path) == []


@pytest.mark.parametrize("keep", [0, -2, 2.0, False])
def test_keep_below_one_or_not_an_integer_is_refused(tmp_path: Path, keep: object) -> None:
    with pytest.raises(ValueError, match="keep"):
        checkpoint.save({}, 1, keep=keep, directory=tmp_path)  # type: ignore[arg-type]
    assert names(tmp_path) == []


def test_integer_like_steps_are_accepted(tmp_path: Path) -> None:
    path = checkpoint.save({}, torch.tensor(7), directory=tmp_path)
    assert path is not None and path.name == "checkpoint-000000000007.pt"


def test_restart_count_reads_the_variable_the_server_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    assert checkpoint.restart_count() == 0
    monkeypatch.setenv("MLYARD_RESTART_COUNT", "")
    assert checkpoint.restart_count() == 0
    monkeypatch.setenv("MLYARD_RESTART_COUNT", "2")
    assert checkpoint.restart_count() == 2
    monkeypatch.setenv("MLYARD_RESTART_COUNT", "two")
    with pytest.raises(ValueError, match="MLYARD_RESTART_COUNT"):
        checkpoint.restart_count()


def test_importing_the_sdk_does_not_import_torch() -> None:
    probe = "import sys; from mlyard.sdk import checkpoint; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "False"
