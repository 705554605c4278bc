"""Showing replay results: a Rich table with one column per policy, and a JSON document.

Policies sit side by side because the point of a replay is the comparison; when
``fifo`` is among them, each policy's average JCT is also given as a ratio to
FIFO's, the baseline every other policy is meant to beat. A load sweep gives one
table per load, so the columns still compare policies on the same arrivals, and
the ratio to FIFO is taken within each load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.table import Table

from .load import Offered
from .measures import Metrics


def duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _number(digits: int) -> Callable[[float], str]:
    return lambda value: "-" if isinstance(value, float) and math.isnan(value) else f"{value:,.{digits}f}"


def _percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("jobs", "jobs replayed", _number(0)),
    ("rejected", "rejected (never fit)", _number(0)),
    ("avg_jct", "avg JCT", duration),
    ("p50_jct", "p50 JCT", duration),
    ("p99_jct", "p99 JCT", duration),
    ("avg_queueing", "avg queueing delay", duration),
    ("p99_queueing", "p99 queueing delay", duration),
    ("makespan", "makespan", duration),
    ("utilization", "GPU utilization (p10–p90 arrivals)", _percent),
    ("p99_bounded_slowdown", "p99 bounded slowdown", _number(1)),
    ("preemptions_per_job", "preemptions per job", _number(3)),
    ("jain_fairness", "Jain's fairness (tenants)", _number(3)),
    ("predicted_share", "jobs with a predicted run time", _percent),
    ("trusted_share", "jobs with a trusted prediction", _percent),
    ("prediction_error", "prediction median relative error", _percent),
    ("decision_p50_ms", "decide() p50 ms", _number(2)),
    ("decision_p99_ms", "decide() p99 ms", _number(2)),
    ("decide_calls", "decide() calls", _number(0)),
    ("decide_seconds", "time in decide() s", _number(1)),
    ("wall_seconds", "replay wall time s", _number(1)),
)


def fifo_ratio(results: Sequence[Metrics]) -> dict[str, float]:
    """Each policy's avg JCT divided by FIFO's; empty when FIFO was not replayed."""
    baseline = next((result.avg_jct for result in results if result.policy == "fifo"), None)
    if not baseline:
        return {}
    return {result.policy: result.avg_jct / baseline for result in results}


def table(results: Sequence[Metrics], title: str) -> Table:
    # As wide as its title: a narrow table (one policy) would otherwise wrap the title mid-phrase.
    table = Table(title=title, header_style="bold", min_width=len(title))
    table.add_column("metric")
    for result in results:
        table.add_column(result.policy, justify="right")
    for field, label, show in ROWS:
        table.add_row(label, *(show(getattr(result, field)) for result in results))
    ratios = fifo_ratio(results)
    if ratios and len(results) > 1:
        table.add_row("avg JCT / fifo", *(f"{ratios[result.policy]:.3f}" for result in results))
    return table


def offered_line(offered: Offered) -> str:
    """The offered load and the figures it comes from, for the line above a table."""
    hours = offered.gpu_seconds / 3600
    shown = f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"
    ratio = offered.offered_load
    figure = "-" if math.isnan(ratio) else f"{ratio:.2f}"
    return (f"offered load {figure} = {shown} GPU-h / "
            f"({offered.cluster_gpus:,} GPUs × {duration(offered.arrival_span)} of arrivals)")


def _rows(results: Sequence[Metrics], **extra: object) -> list[dict[str, object]]:
    ratios = fifo_ratio(results)
    return [{**result.as_dict(), **extra, **({"avg_jct_vs_fifo": ratios[result.policy]} if ratios else {})}
            for result in results]


def document(results: Sequence[Metrics], **context: object) -> dict[str, object]:
    return {**context, "results": _rows(results)}


def sweep_document(sweep: Sequence[tuple[Offered, Sequence[Metrics]]], **context: object) -> dict[str, object]:
    """One document for every load: each result carries its ``load`` and ``offered_load``."""
    results = []
    for offered, metrics in sweep:
        figures = offered.as_dict()
        results += _rows(metrics, load=offered.load, offered_load=figures["offered_load"])
    return {**context, "loads": [offered.as_dict() for offered, _ in sweep], "results": results}


def write_json(path: Path, sweep: Sequence[tuple[Offered, Sequence[Metrics]]], **context: object) -> None:
    """Write the results of every load (and ``context``: trace, cluster, options) as one JSON document."""
    text = json.dumps(sweep_document(sweep, **context), indent=2, default=str) + "\n"
    path.write_text(text)
