"""`mlyard.sdk.report` never breaks the training it measures."""

from __future__ import annotations

import numpy
import pytest
import torch

from mlyard.sdk import metrics, report


@pytest.fixture
def in_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # A port nothing listens on: the server of this "job" is unreachable.
    monkeypatch.setenv("MLYARD_API", "http://127.0.0.1:9")
    monkeypatch.setenv("MLYARD_JOB_ID", "1")
    monkeypatch.setenv("MLYARD_TOKEN", "mly_nothing")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(metrics, "_client", None)


def test_outside_mlyard_and_on_other_ranks_it_does_nothing(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MLYARD_API", raising=False)
    assert report(step=1, loss=0.5) is False
    monkeypatch.setenv("MLYARD_API", "http://127.0.0.1:9")
    monkeypatch.setenv("MLYARD_JOB_ID", "1")
    monkeypatch.setenv("RANK", "3")
    assert report(step=1, loss=0.5) is False
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("in_a_job")
@pytest.mark.parametrize(("step", "values", "message"), [
    (1, {"loss": float("nan")}, "loss=nan is not a finite number"),
    (1, {"loss": float("inf")}, "loss=inf is not a finite number"),
    (1, {"loss": "0.5"}, "loss='0.5' is not a finite number"),
    (1, {"loss": True}, "loss=True is not a finite number"),
    (1, {"loss": numpy.zeros(3)}, "is not a finite number"),
    (-1, {"loss": 1.0}, "step must be a non-negative integer"),
    (1.5, {"loss": 1.0}, "step must be a non-negative integer"),
    (1, {}, "no metrics given"),
])
def test_absurd_input_is_a_clear_line_on_stderr_not_an_exception(step, values, message,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert report(step=step, **values) is False
    assert message in capsys.readouterr().err


@pytest.mark.usefixtures("in_a_job")
def test_an_unreachable_server_loses_the_point_not_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert report(step=4, loss=torch.tensor(0.5), accuracy=numpy.float64(0.9)) is False
    assert "step 4 was not stored: cannot reach the mlyard server" in capsys.readouterr().err


def test_numbers_of_every_kind_are_read() -> None:
    assert [metrics._number(value) for value in (3, 0.5, numpy.int64(2), numpy.float32(0.25), torch.tensor([1.5]))] \
        == [3.0, 0.5, 2.0, 0.25, 1.5]
    assert metrics._number(torch.ones(2)) is None and metrics._number(None) is None
