"""Elastic jobs' scaling curves fitted from the throughput they report (`control/scaling_fits.py`),
and handed to the scheduler with the running job."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlyard.scheduler.scaling import speedup
from mlyard.server.control.scaling_fits import ScalingFits, fit_serial_fraction
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, MetricRow, ReplicaRow
from test_rounds import make_world, submit


@pytest.mark.parametrize("serial", [0.0, 0.05, 0.3, 0.8])
def test_amdahls_serial_fraction_is_recovered_from_throughput_at_several_sizes(serial: float) -> None:
    points = [(replicas, 120.0 * speedup(replicas, serial)) for replicas in (1, 2, 4, 8)]
    assert fit_serial_fraction(points) == pytest.approx(serial, abs=1e-9)
    assert fit_serial_fraction(points[1:3]) == pytest.approx(serial, abs=1e-9), "two sizes are enough"


def test_what_gives_no_curve_or_a_flat_one() -> None:
    assert fit_serial_fraction([(2, 100.0), (2, 110.0)]) is None, "one size says nothing of scaling"
    assert fit_serial_fraction([(1, 100.0), (4, float("nan")), (0, 5.0)]) is None
    assert fit_serial_fraction([(1, 100.0), (4, 80.0)]) == 1.0, "slower with more replicas: nothing gained"
    assert fit_serial_fraction([(1, 100.0), (2, 250.0)]) == 0.0, "better than linear counts as linear"


def ran(database: Database, job_id: int, number: int, replicas: int, throughputs: list[float], *,
        finished: bool) -> None:
    """An attempt of `replicas` replicas that reported `throughputs` from rank 0 (and noise from rank 1)."""
    now = time.time()
    with database.transaction() as session:
        attempt = AttemptRow(job_id=job_id, number=number, created_at=now, launched_at=now, running_at=now,
                             finished_at=now if finished else None)
        attempt.replicas = [ReplicaRow(job_id=job_id, role="worker", index=index, rank=index, node="n1",
                                       cpu_ids=[index], gpu_ids=[], memory_bytes=1 << 20, state="running",
                                       directory=f"/tmp/replica-{job_id}-{number}-{index}")
                            for index in range(replicas)]
        session.add(attempt)
        session.add_all(MetricRow(job_id=job_id, attempt=number, rank=rank, step=step, name="samples_per_second",
                                  value=value if rank == 0 else 1.0, at=now)
                        for step, value in enumerate(throughputs) for rank in (0, 1))
        session.get(JobRow, job_id).attempt_count = number


def test_a_running_elastic_job_reaches_the_scheduler_with_its_curve(tmp_path: Path, database_url: str) -> None:
    database, _, controller = make_world(tmp_path, database_url, cpus=4)
    elastic = submit(database, elastic={"min_replicas": 1, "max_replicas": 4})
    rigid = submit(database, roles=[{"replicas": 1}])
    # Serial fraction 0.25: one replica does 100 samples/s, two do 160. Warm-up epochs are slower.
    ran(database, elastic, 1, 1, [40.0, 100.0, 101.0, 99.0], finished=True)
    ran(database, elastic, 2, 2, [70.0, 160.0, 160.0], finished=False)
    ran(database, rigid, 1, 1, [50.0], finished=False)
    round_ = controller.rounds.prepare(time.time())
    assert round_ is not None
    fractions = {run.job_id: run.serial_fraction for run in round_.snapshot.running}
    assert fractions[elastic] == pytest.approx(0.25, abs=0.01) and fractions[rigid] is None
    database.close()


def test_fits_are_made_again_only_after_a_while_and_forgotten_with_their_job(tmp_path: Path,
                                                                             database_url: str) -> None:
    database, _, _ = make_world(tmp_path, database_url, cpus=4)
    job = submit(database, elastic={"min_replicas": 1, "max_replicas": 4})
    ran(database, job, 1, 1, [100.0], finished=True)
    fits = ScalingFits(refit_seconds=60)
    with database.reading() as session:
        assert fits.fractions(session, [job], now=1000.0) == {}, "one size: no curve yet"
    ran(database, job, 2, 4, [400.0], finished=False)
    with database.reading() as session:
        assert fits.fractions(session, [job], now=1030.0) == {}, "not refitted within the minute"
        assert fits.fractions(session, [job], now=1060.0) == {job: pytest.approx(0.0)}
        assert fits.fitted == 2
        assert fits.fractions(session, [], now=1070.0) == {}
        assert fits.fractions(session, [job], now=1071.0) == {job: pytest.approx(0.0)}
    assert fits.fitted == 3, "a job asked about again is fitted afresh"
    database.close()
