"""Names and labels of the objects of an attempt, derived from the job, attempt and replica
alone, so a restarted server finds a replica's pod from its directory
(`runs/<job>/<attempt>/<replica>`) without any state of its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "mlyard"
JOB_LABEL = "mlyard/job"
ATTEMPT_LABEL = "mlyard/attempt"
ROLE_LABEL = "mlyard/role"
INDEX_LABEL = "mlyard/index"
REPLICA_LABEL = "mlyard/replica"
RANK_LABEL = "mlyard/rank"
REPLICA_ID_ANNOTATION = "mlyard/replica-id"
DIRECTORY_ANNOTATION = "mlyard/directory"
SELECTOR = f"{MANAGED_BY}={MANAGER}"
"""Every object mlyard creates carries it: the watch and the cleanup look at nothing else."""
CONTAINER = "replica"
_LABEL_LIMIT = 63


def dns_label(name: str) -> str:
    """`name` if it fits a DNS label (63 characters), else a shortened form that stays unique."""
    if len(name) <= _LABEL_LIMIT:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:_LABEL_LIMIT - 9].rstrip('-')}-{digest}"


def service_name(job_id: int | str, attempt: int | str) -> str:
    """The attempt's headless Service (also its pods' DNS subdomain) and its token Secret."""
    return f"mlyard-j{job_id}-a{attempt}"


def pod_name(job_id: int | str, attempt: int | str, replica: str) -> str:
    return f"{service_name(job_id, attempt)}-{replica}"


def hostname(replica: str) -> str:
    return dns_label(replica)


def replica_address(job_id: int | str, attempt: int | str, replica: str, namespace: str, cluster_domain: str) -> str:
    """The pod's stable DNS name: `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>`."""
    return f"{hostname(replica)}.{service_name(job_id, attempt)}.{namespace}.svc.{cluster_domain}"


def role_and_index(replica: str) -> tuple[str, int]:
    """`worker-3` → (`worker`, 3): replica names are `<role>-<index>` and roles may hold dashes."""
    role, _, index = replica.rpartition("-")
    return role, int(index)


def from_directory(directory: Path) -> tuple[str, str, str]:
    """(job, attempt, replica) of a replica directory `.../runs/<job>/<attempt>/<replica>`."""
    return directory.parent.parent.name, directory.parent.name, directory.name


def attempt_labels(job_id: int | str, attempt: int | str) -> dict[str, str]:
    return {MANAGED_BY: MANAGER, JOB_LABEL: str(job_id), ATTEMPT_LABEL: str(attempt)}
