"""Run times predicted from the history of jobs like it (`scheduler/predictions.py`), and trusted
only while they come true."""

from __future__ import annotations

import pytest

from mlyard.scheduler import PendingJob, ReplicaPlacement, ReplicaRequest, RunningJob
from mlyard.scheduler.predictions import DurationHistory, median_relative_error, relative_error


def test_a_key_predicts_the_median_of_its_last_jobs_once_it_has_enough() -> None:
    history = DurationHistory(window=4, min_samples=3)
    history.record("resnet", 100.0, None)
    history.record("resnet", 300.0, None)
    assert history.predict("resnet") is None, "two jobs are not enough"
    history.record("resnet", 200.0, None)
    assert history.predict("resnet") == 200.0
    for seconds in (1000.0, 1000.0, 1000.0):
        history.record("resnet", seconds, None)
    assert history.predict("resnet") == 1000.0, "only the last four count"
    assert history.predict("bert") is None, "keys do not mix"


def test_a_steady_key_is_trusted_and_an_erratic_one_is_not() -> None:
    history = DurationHistory(window=8, min_samples=3)
    for seconds in (600.0, 610.0, 590.0):
        history.record("steady", seconds, history.predict("steady"))
    assert not history.trusted("steady"), "no prediction of it has been checked yet"
    for seconds in (605.0, 600.0, 598.0):
        history.record("steady", seconds, history.predict("steady"))
    assert history.trusted("steady") and history.trusted_prediction("steady") == pytest.approx(600, rel=0.02)

    for seconds in (60.0, 6000.0, 600.0, 30.0, 9000.0, 100.0, 4000.0):
        history.record("erratic", seconds, history.predict("erratic"))
    assert history.predict("erratic") is not None
    assert not history.trusted("erratic") and history.trusted_prediction("erratic") is None


def test_a_key_that_stops_being_predictable_loses_its_trust_within_its_window() -> None:
    history = DurationHistory(window=6, min_samples=3)
    for _ in range(8):
        history.record("job", 1000.0, history.predict("job"))
    assert history.trusted("job")
    for seconds in (50.0, 20_000.0, 50.0, 20_000.0):
        history.record("job", seconds, history.predict("job"))
    assert not history.trusted("job")


def test_errors_are_relative_with_a_floor_for_instant_jobs() -> None:
    assert relative_error(150.0, 100.0) == 0.5
    assert relative_error(10.0, 0.0) == 10.0
    assert median_relative_error([(100.0, 100.0), (200.0, 100.0), (50.0, 100.0)]) == 0.5
    assert median_relative_error([]) is None


def test_the_keys_whose_jobs_finished_longest_ago_are_forgotten_first() -> None:
    history = DurationHistory(window=4, min_samples=1, max_keys=2)
    history.record("a", 10.0, None)
    history.record("b", 20.0, None)
    history.record("a", 10.0, None)  # a is recent again
    history.record("c", 30.0, None)
    assert len(history) == 2
    assert (history.predict("a"), history.predict("b"), history.predict("c")) == (10.0, None, 30.0)


@pytest.mark.parametrize("arguments", [{"window": 0}, {"min_samples": 0}, {"window": 2, "min_samples": 3},
                                       {"trusted_error": -1.0}, {"max_keys": 0}])
def test_a_history_that_could_never_predict_is_refused(arguments: dict) -> None:
    with pytest.raises(ValueError):
        DurationHistory(**arguments)


def test_the_errors_trust_is_judged_on_are_those_of_the_predictions_given() -> None:
    history = DurationHistory(window=4, min_samples=1)
    history.record("job", 100.0, None)
    history.record("job", 200.0, 100.0)
    history.record("job", 100.0, 200.0)
    assert history.recent_errors("job") == (0.5, 1.0) and history.recent_errors("other") == ()


@pytest.mark.parametrize("fields", [{"serial_fraction": 1.5}, {"serial_fraction": -0.1},
                                    {"predicted_duration": -1.0}, {"predicted_duration": float("nan")}])
def test_estimates_no_job_could_have_are_refused_naming_the_job(fields: dict) -> None:
    replicas = (ReplicaRequest("worker", 0, 1, 0, 1),)
    with pytest.raises(ValueError, match="job 7: (serial_fraction|predicted_duration)"):
        PendingJob(7, 0.0, replicas, **fields)
    if "serial_fraction" in fields:
        placement = ReplicaPlacement("worker", 0, "n", (0,), (0,), 0)
        with pytest.raises(ValueError, match="job 7: serial_fraction"):
            RunningJob(7, (placement,), **fields)
