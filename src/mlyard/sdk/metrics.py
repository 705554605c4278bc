"""Training metrics from inside a job: `report(step=…, loss=…, accuracy=…)`.

Only rank 0 reports unless told otherwise (data-parallel ranks see the same numbers). A report
never breaks the training it measures: a value that is not a finite number, a server that
does not answer, or a refusal is written to stderr as one clear line and `report` returns
False. Outside mlyard (no MLYARD_API) it does nothing.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

API_VARIABLE = "MLYARD_API"
TOKEN_VARIABLE = "MLYARD_TOKEN"
JOB_VARIABLE = "MLYARD_JOB_ID"
TIMEOUT_SECONDS = 5.0
_client: Any = None


def report(step: int, *, all_ranks: bool = False, **metrics: Any) -> bool:
    """Sends `metrics` (name=number) for `step`; True once the server stored them."""
    rank = int(os.environ.get("RANK") or 0)
    if rank != 0 and not all_ranks:
        return False
    if not os.environ.get(API_VARIABLE) or not os.environ.get(JOB_VARIABLE):
        return False
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return _refuse(f"step must be a non-negative integer, not {step!r}")
    if not metrics:
        return _refuse("no metrics given; call report(step=…, loss=…)")
    values = {}
    for name, value in metrics.items():
        number = _number(value)
        if number is None or not math.isfinite(number):
            return _refuse(f"{name}={value!r} is not a finite number; nothing of step {step} was reported")
        values[name] = number
    try:
        _connection().report(int(os.environ[JOB_VARIABLE]), step, values, rank=rank)
    except Exception as error:  # noqa: BLE001 - reporting must never end the training
        return _refuse(f"step {step} was not stored: {error}")
    return True


def _number(value: Any) -> float | None:
    """Python and NumPy numbers, one-element arrays and tensors; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            value = item()
        except (ValueError, RuntimeError, TypeError):  # more than one element
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _connection():
    global _client
    if _client is None:
        from mlyard.client import Client

        # No retries across a server restart here: a lost point is better than a stalled step.
        _client = Client(os.environ[API_VARIABLE], os.environ.get(TOKEN_VARIABLE), timeout=TIMEOUT_SECONDS,
                         retry_seconds=0)
    return _client


def _refuse(message: str) -> bool:
    print(f"mlyard.sdk.report: {message}", file=sys.stderr, flush=True)
    return False
