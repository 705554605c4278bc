"""A typed HTTP client for the mlyard API, used by the CLI, the in-job SDK and tests.

The server is found through MLYARD_URL or MLYARD_HOME (see `mlyard.client.settings`); the token
through MLYARD_TOKEN, the one `mlyard login` stored for that server, or the admin token file.
"""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from mlyard.api.job_listing import DEFAULT_PAGE_JOBS, MAX_PAGE_JOBS
from mlyard.client import settings as client_settings

if TYPE_CHECKING:  # each call imports the models it reads: every command (and the SDK) starts sooner
    from mlyard.api.errors import FieldError
    from mlyard.api.jobs import JobDetail, JobInfo, LogChunk, TensorBoardInfo
    from mlyard.job_status import JobStatus
    from mlyard.spec import JobSpec
    from mlyard.api.accounts import IssuedToken, TokenInfo, UserInfo
    from mlyard.api.health import Health
    from mlyard.client.datasets import Datasets
    from mlyard.client.labeling import Labeling
    from mlyard.client.models import Models
    from mlyard.client.volumes import Volumes
    from mlyard.api.resources import JobResources, NodeSamples, RunningJobUsage
    from mlyard.api.metrics import MetricsPage
    from mlyard.api.nodes import NodeInfo
    from mlyard.api.queues import QueueInfo
    from mlyard.api.snapshots import SnapshotInfo
    from mlyard.api.usage import UsageReport
    from mlyard.api.audit import AuditPage
    from mlyard.api.environments import EnvironmentInfo, EnvironmentRequest
    from mlyard.api.projects import ProjectInfo, ProjectStorage

UPLOAD_CHUNK = 256 * 1024
RETRY_SECONDS = 60.0
"""How long a request that is safe to repeat keeps being retried while the server cannot be
reached (it may be restarting)."""


def _list_of(model: type, items: Any) -> list:
    """`items` validated as a list of `model`; pydantic is imported here, as the models are, so that
    commands that read no model (`mlyard jobs`, `--help`) start without it."""
    from pydantic import TypeAdapter
    return TypeAdapter(list[model]).validate_python(items)


class ClientError(Exception):
    """An answer other than success, or no answer; `str()` is one line for a person."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 details: Sequence[FieldError] = ()):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details = list(details)


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retry_seconds: float = RETRY_SECONDS):
        self.url = (url or client_settings.server_url()).rstrip("/")
        self.retry_seconds = retry_seconds
        self._reached = False
        self.token = token if token is not None else client_settings.api_token()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        # Certificates are loaded for an https server only: reading them costs every command tens
        # of milliseconds. The bare context of a plain-http one has none, so it would refuse any TLS.
        verify = True if self.url.startswith("https://") else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._http = httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=timeout, verify=verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, *, retry: bool | None = None, **kwargs: Any) -> httpx.Response:
        """`retry`: repeat on connection errors for up to `retry_seconds` (by default for GETs
        only; a POST only when it carries an Idempotency-Key, so a repeat cannot duplicate).
        A server this client never reached is reported at once: it is not running, rather than
        restarting."""
        retry = method == "GET" if retry is None else retry
        deadline = time.monotonic() + self.retry_seconds
        pause = 0.1
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
                self._reached = True
                break
            except httpx.TransportError as error:
                restarting = self._reached or not isinstance(error, httpx.ConnectError)
                if retry and restarting and time.monotonic() + pause < deadline:
                    time.sleep(pause)
                    pause = min(pause * 2, 2.0)
                    continue
                raise ClientError(
                    f"cannot reach the mlyard server at {self.url} ({error.__class__.__name__}); "
                    "is it running? Start it with 'mlyard server start'"
                ) from error
        if response.is_success:
            return response
        from mlyard.api.errors import ErrorBody
        try:
            body = ErrorBody.model_validate(response.json())
            raise ClientError(body.message, status=response.status_code, code=body.error, details=body.details)
        except ValueError:
            raise ClientError(f"the server answered {response.status_code}: {response.text[:200]}",
                              status=response.status_code) from None

    @property
    def datasets(self) -> Datasets:
        """The dataset calls (`client/datasets.py`)."""
        from mlyard.client.datasets import Datasets
        return Datasets(self)

    @property
    def models(self) -> Models:
        """The model registry calls (`client/models.py`)."""
        from mlyard.client.models import Models
        return Models(self)

    @property
    def labeling(self) -> Labeling:
        """The labeling task calls (`client/labeling.py`)."""
        from mlyard.client.labeling import Labeling
        return Labeling(self)

    @property
    def volumes(self) -> Volumes:
        """The volume calls (`client/volumes.py`)."""
        from mlyard.client.volumes import Volumes
        return Volumes(self)

    def health(self) -> Health:
        from mlyard.api.health import Health
        return Health.model_validate(self._request("GET", "/health").json())

    def submit(self, spec: JobSpec | dict[str, Any], *, idempotency_key: str | None = None) -> JobInfo:
        """Submits with an Idempotency-Key (a new one unless given) and retries on connection
        errors: an answer lost to a server crash never leads to a second job."""
        from mlyard.api.jobs import JobInfo
        from mlyard.spec import JobSpec
        payload = spec.model_dump(mode="json", exclude_defaults=True) if isinstance(spec, JobSpec) else spec
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return JobInfo.model_validate(
            self._request("POST", "/jobs", json=payload, headers=headers, retry=True).json())

    def submit_batch(self, items: Sequence[tuple[JobSpec | dict[str, Any], str | None]]) -> list[tuple[JobInfo, bool]]:
        """Submits up to 1,000 jobs in one request, all stored or none: each item is a spec and
        its idempotency key (a new one where None). Retried on connection errors like `submit`:
        an answer lost to a server crash never leads to second jobs. Returns each job, in order,
        and whether an earlier request with its key had created it."""
        from mlyard.api.jobs import JobBatchResult
        from mlyard.spec import JobSpec
        body = {"jobs": [
            {"spec": spec.model_dump(mode="json", exclude_defaults=True) if isinstance(spec, JobSpec) else spec,
             "idempotency_key": key or str(uuid.uuid4())}
            for spec, key in items
        ]}
        result = JobBatchResult.model_validate(self._request("POST", "/jobs:batch", json=body, retry=True).json())
        return [(item.job, item.replayed) for item in result.items]

    def jobs_page(self, *, statuses: Sequence[JobStatus] = (), include_finished: bool = False,
                  queue: str | None = None, owner: str | None = None, search: str | None = None,
                  project: str | None = None, after: int | None = None,
                  limit: int = DEFAULT_PAGE_JOBS) -> tuple[list[JobInfo], int, int | None]:
        """One page of jobs, newest first: those with an id below `after` (None: the newest).
        Returns the jobs, how many match the filters in all, and the `after` of the next page
        (None when this one is the last)."""
        from mlyard.api.jobs import JobInfo
        page, total, following = self.jobs_page_json(statuses=statuses, include_finished=include_finished,
                                                     queue=queue, owner=owner, search=search, project=project,
                                                     after=after, limit=limit)
        return _list_of(JobInfo, page), total, following

    def jobs_page_json(self, *, statuses: Sequence[JobStatus] = (), include_finished: bool = False,
                       queue: str | None = None, owner: str | None = None, search: str | None = None,
                       project: str | None = None, after: int | None = None,
                       limit: int = DEFAULT_PAGE_JOBS) -> tuple[list[dict[str, Any]], int, int | None]:
        """`jobs_page` with each job as the server's JSON object (`JobInfo`'s fields), for a
        caller that only prints them: validating a page of full specs costs more than fetching it."""
        params: list[tuple[str, str | int]] = [("status", status.value) for status in statuses]
        if include_finished:
            params.append(("all", "true"))
        params += [(name, value) for name, value in (("queue", queue), ("owner", owner), ("search", search),
                                                     ("project", project)) if value]
        params.append(("limit", limit))
        if after is not None:
            params.append(("after", after))
        response = self._request("GET", "/jobs", params=params)
        following = response.headers.get("X-Next-After")
        return response.json(), int(response.headers.get("X-Total-Count", "0")), int(following) if following else None

    def jobs(self, *, statuses: Sequence[JobStatus] = (), include_finished: bool = False, queue: str | None = None,
             owner: str | None = None, search: str | None = None) -> list[JobInfo]:
        """Every job that matches, newest first, read page by page (`jobs_page`)."""
        found: list[JobInfo] = []
        after: int | None = None
        while True:
            page, _total, after = self.jobs_page(statuses=statuses, include_finished=include_finished, queue=queue,
                                                 owner=owner, search=search, after=after, limit=MAX_PAGE_JOBS)
            found += page
            if after is None:
                return found

    def job(self, job_id: int) -> JobDetail:
        from mlyard.api.jobs import JobDetail
        return JobDetail.model_validate(self._request("GET", f"/jobs/{job_id}").json())

    def cancel(self, job_id: int) -> JobInfo:
        from mlyard.api.jobs import JobInfo
        return JobInfo.model_validate(self._request("POST", f"/jobs/{job_id}/cancel").json())

    def logs(self, job_id: int, *, replica: str | None = None, attempt: int | None = None, offset: int = 0) -> LogChunk:
        params: dict[str, Any] = {"offset": offset}
        if replica is not None:
            params["replica"] = replica
        if attempt is not None:
            params["attempt"] = attempt
        from mlyard.api.jobs import LogChunk
        return LogChunk.model_validate(self._request("GET", f"/jobs/{job_id}/logs", params=params).json())

    def follow_logs(self, job_id: int, *, replica: str | None = None, attempt: int | None = None,
                    poll_seconds: float = 0.5) -> Iterator[str]:
        """Yields log text as it is written until the replica is done (or the job has ended);
        the latest attempt unless `attempt` is given."""
        offset = 0
        while True:
            chunk = self.logs(job_id, replica=replica, attempt=attempt, offset=offset)
            attempt = attempt or chunk.attempt or None
            offset = chunk.next_offset
            if chunk.text:
                yield chunk.text
            elif chunk.complete:
                return
            else:
                time.sleep(poll_seconds)

    def report(self, job_id: int, step: int, metrics: dict[str, float], *, rank: int = 0) -> int:
        body = {"step": step, "metrics": metrics, "rank": rank}
        return self._request("POST", f"/jobs/{job_id}/metrics", json=body).json()["stored"]

    def metrics(self, job_id: int, *, names: Sequence[str] = (), after: int = 0) -> MetricsPage:
        from mlyard.api.metrics import MetricsPage
        params: list[tuple[str, str | int]] = [("name", name) for name in names]
        params.append(("after", after))
        return MetricsPage.model_validate(self._request("GET", f"/jobs/{job_id}/metrics", params=params).json())

    def tensorboard(self, job_id: int) -> TensorBoardInfo:
        from mlyard.api.jobs import TensorBoardInfo
        return TensorBoardInfo.model_validate(self._request("GET", f"/jobs/{job_id}/tensorboard").json())

    def usage(self, *, since: float | None = None, until: float | None = None, by: str = "user") -> UsageReport:
        from mlyard.api.usage import UsageReport
        params: dict[str, Any] = {"by": by}
        if since is not None:
            params["since"] = since
        if until is not None:
            params["until"] = until
        return UsageReport.model_validate(self._request("GET", "/usage", params=params).json())

    def audit(self, *, since: float | None = None, until: float | None = None, actor: str | None = None,
              route: str | None = None, limit: int = 100, before_id: int | None = None) -> AuditPage:
        """Requests that changed something, newest first (administrators only)."""
        from mlyard.api.audit import AuditPage
        params = {name: value for name, value in (("since", since), ("until", until), ("actor", actor),
                                                  ("route", route), ("limit", limit), ("before_id", before_id))
                  if value is not None}
        return AuditPage.model_validate(self._request("GET", "/audit", params=params).json())

    def nodes(self) -> list[NodeInfo]:
        from mlyard.api.nodes import NodeInfo
        return _list_of(NodeInfo, self._request("GET", "/nodes").json())

    def node_samples(self, name: str, *, since: float | None = None, resolution: str = "raw") -> NodeSamples:
        from mlyard.api.resources import NodeSamples
        params: dict[str, Any] = {"resolution": resolution, **({"since": since} if since is not None else {})}
        return NodeSamples.model_validate(self._request("GET", f"/nodes/{name}/samples", params=params).json())

    def job_resources(self, job_id: int, *, since: float | None = None, resolution: str = "raw") -> JobResources:
        """CPU, memory and GPU memory of the job's processes over time, and of each replica now."""
        from mlyard.api.resources import JobResources
        params: dict[str, Any] = {"resolution": resolution, **({"since": since} if since is not None else {})}
        return JobResources.model_validate(self._request("GET", f"/jobs/{job_id}/resources", params=params).json())

    def running_jobs(self) -> list[RunningJobUsage]:
        """Every job holding resources with its replicas' latest figures added up, in one request."""
        from mlyard.api.resources import RunningJobUsage
        return _list_of(RunningJobUsage, self._request("GET", "/resources/jobs").json())

    def queues(self) -> list[QueueInfo]:
        from mlyard.api.queues import QueueInfo
        return _list_of(QueueInfo, self._request("GET", "/queues").json())

    def queue(self, name: str) -> QueueInfo:
        from mlyard.api.queues import QueueInfo
        return QueueInfo.model_validate(self._request("GET", f"/queues/{name}").json())

    def set_queue(self, name: str, settings: dict[str, Any]) -> QueueInfo:
        """Creates or updates a queue; `settings` holds only the fields to change (see `QueueSettings`)."""
        from mlyard.api.queues import QueueInfo
        return QueueInfo.model_validate(self._request("PUT", f"/queues/{name}", json=settings, retry=True).json())

    def delete_queue(self, name: str) -> None:
        self._request("DELETE", f"/queues/{name}")

    def login(self, user: str, password: str, *, expires_in: float | None = None,
              token_name: str = "mlyard login") -> IssuedToken:
        """A new token for a user name and password; this client needs no token for it."""
        from mlyard.api.accounts import IssuedToken
        body: dict[str, Any] = {"user": user, "password": password, "token_name": token_name}
        if expires_in is not None:
            body["expires_in"] = expires_in
        return IssuedToken.model_validate(self._request("POST", "/login", json=body).json())

    def whoami(self) -> UserInfo:
        from mlyard.api.accounts import UserInfo
        return UserInfo.model_validate(self._request("GET", "/whoami").json())

    def users(self) -> list[UserInfo]:
        from mlyard.api.accounts import UserInfo
        return _list_of(UserInfo, self._request("GET", "/users").json())

    def create_user(self, name: str, *, password: str | None = None, admin: bool = False) -> UserInfo:
        from mlyard.api.accounts import UserInfo
        body = {"name": name, "password": password, "admin": admin}
        return UserInfo.model_validate(self._request("POST", "/users", json=body).json())

    def set_password(self, name: str, password: str, *, current_password: str | None = None) -> UserInfo:
        from mlyard.api.accounts import UserInfo
        body = {"password": password, "current_password": current_password}
        return UserInfo.model_validate(self._request("PUT", f"/users/{name}/password", json=body).json())

    def tokens(self, *, every_user: bool = False) -> list[TokenInfo]:
        from mlyard.api.accounts import TokenInfo
        params = {"all": "true"} if every_user else {}
        return _list_of(TokenInfo, self._request("GET", "/tokens", params=params).json())

    def create_token(self, name: str, *, expires_in: float | None = None) -> IssuedToken:
        from mlyard.api.accounts import IssuedToken
        body = {"name": name, "expires_in": expires_in}
        return IssuedToken.model_validate(self._request("POST", "/tokens", json=body).json())

    def revoke_token(self, token_id: int) -> TokenInfo:
        from mlyard.api.accounts import TokenInfo
        return TokenInfo.model_validate(self._request("DELETE", f"/tokens/{token_id}").json())

    def projects(self) -> list[ProjectInfo]:
        from mlyard.api.projects import ProjectInfo
        return _list_of(ProjectInfo, self._request("GET", "/projects").json())

    def project(self, name: str) -> ProjectInfo:
        from mlyard.api.projects import ProjectInfo
        return ProjectInfo.model_validate(self._request("GET", f"/projects/{name}").json())

    def create_project(self, name: str, *, description: str | None = None,
                       limits: dict[str, Any] | None = None) -> ProjectInfo:
        from mlyard.api.projects import ProjectInfo
        body = {"name": name, "description": description, "limits": limits or {}}
        return ProjectInfo.model_validate(self._request("POST", "/projects", json=body).json())

    def change_project(self, name: str, change: dict[str, Any]) -> ProjectInfo:
        """`change` holds only what changes: description, limits (see `ProjectChange`)."""
        from mlyard.api.projects import ProjectInfo
        return ProjectInfo.model_validate(self._request("PATCH", f"/projects/{name}", json=change).json())

    def set_member(self, project: str, user: str, role: str) -> ProjectInfo:
        from mlyard.api.projects import ProjectInfo
        response = self._request("PUT", f"/projects/{project}/members/{user}", json={"role": role}, retry=True)
        return ProjectInfo.model_validate(response.json())

    def build_environment(self, request: EnvironmentRequest) -> EnvironmentInfo:
        from mlyard.api.environments import EnvironmentInfo
        response = self._request("POST", "/environments", json=request.model_dump(mode="json"))
        return EnvironmentInfo.model_validate(response.json())

    def environments(self, project: str | None = None) -> list[EnvironmentInfo]:
        from mlyard.api.environments import EnvironmentInfo
        params = {"project": project} if project else None
        return _list_of(EnvironmentInfo, self._request("GET", "/environments", params=params).json())

    def environment(self, name: str) -> EnvironmentInfo:
        from mlyard.api.environments import EnvironmentInfo
        return EnvironmentInfo.model_validate(self._request("GET", f"/environments/{name}").json())

    def remove_environment(self, name: str) -> None:
        self._request("DELETE", f"/environments/{name}")

    def project_storage(self, project: str) -> ProjectStorage:
        from mlyard.api.projects import ProjectStorage
        return ProjectStorage.model_validate(self._request("GET", f"/projects/{project}/snapshots").json())

    def release_snapshot(self, project: str, digest: str) -> ProjectStorage:
        from mlyard.api.projects import ProjectStorage
        return ProjectStorage.model_validate(self._request("DELETE", f"/projects/{project}/snapshots/{digest}").json())

    def remove_member(self, project: str, user: str) -> ProjectInfo:
        from mlyard.api.projects import ProjectInfo
        return ProjectInfo.model_validate(self._request("DELETE", f"/projects/{project}/members/{user}").json())

    def snapshot_exists(self, digest: str, *, project: str | None = None) -> bool:
        """Whether the caller may name `digest` (in `project`) without uploading it."""
        try:
            self._request("GET", f"/snapshots/{digest}", params={"project": project} if project else None)
            return True
        except ClientError as error:
            if error.status == 404:
                return False
            raise

    def upload_snapshot(self, path: Path, digest: str, *, progress: Callable[[int], None] | None = None,
                        project: str | None = None) -> SnapshotInfo:
        from mlyard.api.snapshots import SnapshotInfo
        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as handle:
                while data := handle.read(UPLOAD_CHUNK):
                    yield data
                    if progress is not None:
                        progress(len(data))

        headers = {"Content-Type": "application/gzip", "Content-Length": str(path.stat().st_size)}
        response = self._request("PUT", f"/snapshots/{digest}", content=chunks(), headers=headers,
                                 params={"project": project} if project else None)
        return SnapshotInfo.model_validate(response.json())

    def wait(self, job_id: int, *, poll_seconds: float = 0.5, timeout: float | None = None,
             on_change: Callable[[JobInfo], None] | None = None) -> JobInfo:
        """Polls until the job ends (or `timeout` passes: ClientError)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            job = self.job(job_id)
            if on_change is not None and job.status != last:
                on_change(job)
                last = job.status
            if job.status.is_terminal:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(f"job {job_id} is still {job.status.value} after {timeout:g}s")
            time.sleep(poll_seconds)
