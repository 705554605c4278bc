"""`mlyard.sdk.report` never breaks the training it measures."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy
import pytest
import torch

from mlyard.sdk import flush, metrics, report


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
    assert report(step=4, loss=torch.tensor(0.5), accuracy=numpy.float64(0.9)) is True, "on its way"
    assert flush() is False
    assert "step 4 was not stored: cannot reach the mlyard server" in capsys.readouterr().err
    assert flush() is True, "nothing failed since"


class SlowServer(ThreadingHTTPServer):
    """Takes metric reports, each only once the test lets it answer."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        self.answer = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.answer.wait(30)
                server.received.append({"path": self.path, **body})
                answer = json.dumps({"stored": len(body["metrics"])}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_step_never_waits_for_the_server_and_the_points_arrive_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    server = SlowServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MLYARD_API", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("MLYARD_JOB_ID", "7")
        monkeypatch.setenv("MLYARD_TOKEN", "mly_job")
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setattr(metrics, "_client", None)
        # The server answers nothing until told to: every report returns all the same.
        assert all(report(step=step, loss=1.0 / step) for step in range(1, 6))
        assert server.received == []
        server.answer.set()
        assert flush() is True
        assert [(point["path"], point["step"], point["metrics"]) for point in server.received] == [
            ("/api/v1/jobs/7/metrics", step, {"loss": 1.0 / step}) for step in range(1, 6)]
    finally:
        server.answer.set()
        server.shutdown()


def test_numbers_of_every_kind_are_read() -> None:
    assert [metrics._number(value) for value in (3, 0.5, numpy.int64(2), numpy.float32(0.25), torch.tensor([1.5]))] \
        == [3.0, 0.5, 2.0, 0.25, 1.5]
    assert metrics._number(torch.ones(2)) is None and metrics._number(None) is None
