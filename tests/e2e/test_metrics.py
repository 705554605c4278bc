"""Training metrics: reported by a real job through the SDK, refused clearly when absurd,
stored per step and shown by `mlyard metrics`."""

from __future__ import annotations

import httpx
import pytest
from conftest import RunningServer

from mlyard.api.metrics import MAX_METRICS_PER_REPORT

pytestmark = pytest.mark.slow

REPORTER = """
import numpy
from mlyard.sdk import report
assert report(step=1, loss=0.5, accuracy=numpy.float32(0.25))
assert report(step=2, loss=0.25, accuracy=0.5)
assert not report(step=3, loss=float("nan"))
assert not report(step=3, loss="low")
print("reported")
"""


def api(server: RunningServer, token: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", timeout=30,
                        headers={"Authorization": f"Bearer {token or server.token()}"})


def test_a_job_reports_metrics_through_the_sdk_and_absurd_values_do_not_break_it(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "reporter", "--", "python", "-c", REPORTER)
    assert server.cli("wait", str(job["id"]), "--timeout", "120").returncode == 0, server.cli("logs", str(job["id"]))
    log = server.cli("logs", str(job["id"]), check=True).stdout
    assert "reported" in log
    assert "mlyard.sdk.report: loss=nan is not a finite number; nothing of step 3 was reported" in log
    assert "mlyard.sdk.report: loss='low' is not a finite number" in log

    points = server.cli_json("metrics", str(job["id"]))
    assert [(p["step"], p["name"], p["value"]) for p in points] == [
        (1, "loss", 0.5), (1, "accuracy", 0.25), (2, "loss", 0.25), (2, "accuracy", 0.5),
    ]
    assert {(p["attempt"], p["rank"]) for p in points} == {(1, 0)}
    table = server.cli("metrics", str(job["id"]), check=True).stdout
    assert "STEP" in table and "loss" in table and "accuracy" in table and "0.25" in table


def test_the_metrics_api_refuses_what_is_not_a_finite_number_by_field(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "target", "--", "true")
    assert server.cli("wait", str(job["id"]), "--timeout", "60").returncode == 0
    url = f"/jobs/{job['id']}/metrics"
    with api(server) as client:
        for body, field in (
            ({"step": 1, "metrics": {"loss": "NaN"}}, "metrics.loss"),
            ({"step": 1, "metrics": {"loss": "fast"}}, "metrics.loss"),
            ({"step": -1, "metrics": {"loss": 1}}, "step"),
            ({"step": 1, "metrics": {}}, "metrics"),
            ({"step": 1, "metrics": {"bad name": 1}}, "metrics.bad name.[key]"),
            ({"step": 1, "metrics": {f"m{i}": i for i in range(MAX_METRICS_PER_REPORT + 1)}}, "metrics"),
        ):
            answer = client.post(url, json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert field in [detail["field"] for detail in answer.json()["details"]], (field, answer.text)
        assert client.post(url, json={"step": 7, "metrics": {"loss": 1.5}}).json() == {"stored": 1}
        page = client.get(url).json()
        assert [(p["step"], p["value"]) for p in page["points"]] == [(7, 1.5)]
        assert client.get(url, params={"after": page["next_after"]}).json()["points"] == []
        assert client.post("/jobs/999999/metrics", json={"step": 1, "metrics": {"x": 1}}).status_code == 404
