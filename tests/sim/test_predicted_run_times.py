"""Replays that hand the policy run times predicted from the jobs that finished before
(`EngineOptions.predictions`): on a workload of reruns, predictions come true, are trusted, and
`balanced` orders by them.

One team submits, every four hours or so, a two-hour training job on four GPUs and a
five-minute evaluation on three, together, to a four-GPU machine. Without predictions the
older job (the training) goes first, and the evaluation waits until the training has attained
enough service to be preempted for it; knowing which one is short, the evaluation goes first."""

from __future__ import annotations

import random

import pytest

from mlyard.sim import EngineOptions, TraceJob, simulate, summarize
from mlyard.sim.cluster import queues, synthetic_nodes


def reruns() -> list[TraceJob]:
    rng = random.Random(7)
    jobs, at = [], 0.0
    for burst in range(60):
        at += rng.expovariate(1 / 14400)
        jobs.append(TraceJob(2 * burst + 1, at, 2 * 3600 * rng.uniform(0.95, 1.05), 4, "team"))
        jobs.append(TraceJob(2 * burst + 2, at, 300 * rng.uniform(0.95, 1.05), 3, "team"))
    return jobs


@pytest.fixture(scope="module")
def replays() -> dict[bool, object]:
    jobs = reruns()
    nodes = synthetic_nodes(jobs, 4, 4)
    tenant_queues = queues([job.tenant for job in jobs], nodes, "none")
    return {predicting: simulate(jobs, nodes, EngineOptions(policy="balanced", predictions=predicting),
                                 queues=tenant_queues)
            for predicting in (False, True)}


def test_reruns_are_predicted_closely_and_trusted(replays) -> None:
    metrics = summarize(replays[True])
    assert metrics.jobs == 120
    assert metrics.predicted_share > 0.85 and metrics.trusted_share > 0.8
    assert metrics.prediction_error < 0.1
    first = min(replays[True].outcomes, key=lambda outcome: outcome.job_id)
    assert first.predicted is None and not first.trusted, "nothing had finished when the first job came"


def test_the_evaluations_known_to_be_short_go_first(replays) -> None:
    def evaluations_median_jct(predicting: bool) -> float:
        spans = sorted(outcome.completed_at - outcome.submitted_at
                       for outcome in replays[predicting].outcomes if outcome.gpus == 3)
        return spans[len(spans) // 2]

    without, with_predictions = summarize(replays[False]), summarize(replays[True])
    assert without.trusted_share > 0.8, "predicted and reported all the same, only not used"
    assert evaluations_median_jct(True) < 0.5 * evaluations_median_jct(False)  # 378 s against 1,029 s
    assert with_predictions.avg_jct < without.avg_jct
    assert with_predictions.preemptions_per_job < without.preemptions_per_job  # no training preempted for them
