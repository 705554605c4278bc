"""What reading a list of jobs needs apart from the models: page sizes, and the start of the
warning of a job whose replicas never met. `mlyard jobs` prints the server's JSON with these
alone, without building pydantic's models (`mlyard.api.jobs` names them too)."""

from __future__ import annotations

NOT_CONNECTED = "replicas are not connected to rank 0: each may be training alone"
"""The start of `JobInfo.warning` (and of its job event) for a job whose replicas never met."""
DEFAULT_PAGE_JOBS = 50
MAX_PAGE_JOBS = 1000
