"""Replicas as pods, through the Kubernetes API (the official `kubernetes` client).

`launch` submits what `render_attempt` renders: the headless Service first (its uid makes it
the owner of the rest), then the token Secret, then the pods. `observe` answers from a cache
a watch keeps current (`watcher.py`), asking the API directly for a pod the cache has not
seen yet, and reading `exit.json` on the shared volume for a pod that is gone without a
trace (deleted while the server was down). `stop` deletes pods: with the pod's grace period
(SIGTERM, then SIGKILL) or, forced, at once; deleting what is gone is not an error. Finished
attempts' objects are deleted after `finished_retention_seconds` by a janitor thread.
Project volumes are PersistentVolumeClaims of their own (`volumes.py`): `create_volume` and
`remove_volume` make and delete them, never an attempt's launch or cleanup.

Every call to the API goes through `api`, a `kubernetes.client.CoreV1Api` (or a stand-in
with the same methods), with `_preload_content=False`: answers are read as the API's JSON,
the shape `status.py` and `inventory.py` read.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from mlyard.backends.base import (
    AttemptLaunch,
    Backend,
    NodeDescription,
    ReplicaObservation,
    ReplicaRef,
)
from mlyard.backends.kubernetes import inventory, names, volumes
from mlyard.backends.kubernetes.entrypoint import fresh_directory
from mlyard.backends.kubernetes.objects import render_attempt
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.backends.kubernetes.status import observe_pod, parse_time
from mlyard.backends.kubernetes.watcher import PodCache, PodWatcher
from mlyard.errors import MlyardError
from mlyard.runtime.launch_config import EXIT_FILE, read_json

log = logging.getLogger("mlyard.backends.kubernetes")

WATCH_TIMEOUT_SECONDS = 300
JANITOR_INTERVAL = 60.0
_SYNC_WAIT_SECONDS = 10.0
# What a request to the API raises: an answer other than 2xx, or no answer.
_API_ERRORS = (ApiException, HTTPError, OSError)


class KubernetesError(MlyardError):
    """The Kubernetes API refused or failed a request; the message says which and why."""

    status: int | None = None
    """The HTTP status the API answered; None: it could not be reached."""


class KubernetesBackend(Backend):
    name = "kubernetes"
    node_refresh_seconds = 30.0

    def __init__(self, settings: KubernetesSettings, api: Any, *, watch: bool = True):
        self.settings = settings
        self.api = api
        self.cache = PodCache()
        self._watcher: PodWatcher | None = None
        self._janitor_stopped = threading.Event()
        self._waited_for_sync = False
        if watch:
            self.start_watching()

    # ----------------------------------------------------------------- lifecycle
    def start_watching(self) -> None:
        """Starts the pod watch and the janitor (daemon threads)."""
        self._watcher = PodWatcher(self.cache, self._list_pods, self._watch_pods, on_change=self._changed)
        self._watcher.start()
        threading.Thread(target=self._janitor, name="mlyard-k8s-janitor", daemon=True).start()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        self._janitor_stopped.set()

    def _changed(self) -> None:
        if self.notify is not None:
            self.notify()

    # ----------------------------------------------------------------- contract
    def nodes(self) -> list[NodeDescription]:
        listed = self._call("list nodes", self.api.list_node)
        return sorted(
            (inventory.describe_node(node, self.settings.tolerations) for node in listed.get("items", ())
             if inventory.matches(node, self.settings.node_selector)),
            key=lambda node: node.name,
        )

    def replica_address(self, job_id: int, attempt: int, replica: str, node: str, node_address: str) -> str:
        return names.replica_address(job_id, attempt, replica, self.settings.namespace, self.settings.cluster_domain)

    def reserve_ports(self, node: str, count: int) -> list[int]:
        # Each pod has an IP of its own: the same ports serve every attempt. Ports on one node
        # differ only so that rank 0's MASTER_PORT and its own TensorFlow port never meet.
        return list(range(self.settings.rendezvous_port, self.settings.rendezvous_port + count))

    def dryrun(self, launch: AttemptLaunch) -> list[dict[str, Any]]:
        """The Service, Secret and pods as `launch` creates them, less the owner references
        to the Service, which need the uid the API gives it."""
        return render_attempt(launch, self.settings)

    def launch(self, launch: AttemptLaunch) -> list[ReplicaRef]:
        service, *_ = render_attempt(launch, self.settings)
        for replica in launch.replicas:
            # Mounted by subPath: the kubelet would create a missing directory as root.
            fresh_directory(replica.directory)
        created_service = self._create("service", service)
        uid = created_service["metadata"]["uid"]
        created_pods: list[str] = []
        try:
            _, secret, *pods = render_attempt(launch, self.settings, owner_uid=uid)
            self._create("secret", secret)
            for pod in pods:
                created = self._create("pod", pod)
                created_pods.append(created["metadata"]["name"])
                self.cache.apply("ADDED", created)
        except Exception:
            # Deleting the Service lets the garbage collector take the rest; the pods go at once.
            for pod_name in created_pods:
                self._delete_pod(pod_name, grace=0)
            self._delete("service", service["metadata"]["name"])
            raise
        return [ReplicaRef(replica_id=replica.replica_id, node=replica.node, directory=replica.directory,
                           pid=None, pid_started_at=None)
                for replica in launch.replicas]

    def observe(self, replicas: Sequence[ReplicaRef]) -> dict[int, ReplicaObservation]:
        if replicas and self._watcher is not None and not self._waited_for_sync:
            # Once, at the start: a pod the first list has not brought is read directly anyway.
            self.cache.synced.wait(_SYNC_WAIT_SECONDS)
            self._waited_for_sync = True
        now = time.time()
        result = {}
        for ref in replicas:
            pod, deleted = self._find(ref)
            if pod is None or (deleted and not _terminated(pod)):
                # Gone without a trace in the API: the launcher's exit status on the shared volume tells.
                exited = read_json(ref.directory / EXIT_FILE)
                if exited is not None:
                    result[ref.replica_id] = ReplicaObservation(
                        state="exited", exit_code=exited["exit_code"], finished_at=exited.get("finished_at"),
                        reason=exited.get("reason"))
                    continue
            result[ref.replica_id] = observe_pod(pod, deleted=deleted, now=now,
                                                 start_timeout=self.settings.start_timeout_seconds)
        return result

    def _stop_present(self, replicas: Sequence[ReplicaRef], *, force: bool) -> None:
        for ref in replicas:
            self._delete_pod(_pod_name(ref), grace=0 if force else None)

    def _clean_up_gone(self, replicas: Sequence[ReplicaRef]) -> None:
        """A lost replica's pod may linger (evicted, stuck terminating on a dead node): it goes
        at once. Exited pods stay for `kubectl logs` until the janitor takes their attempt."""
        for ref in replicas:
            pod, deleted = self.cache.get(_pod_name(ref))
            if pod is not None and not deleted and not _terminated(pod):
                self._delete_pod(_pod_name(ref), grace=0)

    # ----------------------------------------------------------------- volumes
    def create_volume(self, claim: str, size_bytes: int) -> str | None:
        """Creates the claim; one already there (an earlier try) is the volume, described as the
        API keeps it."""
        from kubernetes import client

        body = volumes.render_claim(claim, size_bytes, self.settings)
        try:
            created = self._call(f"create PersistentVolumeClaim {self.settings.namespace}/{claim}",
                                 self.api.create_namespaced_persistent_volume_claim, self.settings.namespace,
                                 client.V1PersistentVolumeClaim.from_dict(body))
        except KubernetesError as error:
            if error.status != 409:
                raise
            created = self._call(f"read PersistentVolumeClaim {self.settings.namespace}/{claim}",
                                 self.api.read_namespaced_persistent_volume_claim, claim, self.settings.namespace)
            size_bytes = _claim_request(created, size_bytes)
        return volumes.enforcement(size_bytes, volumes.claim_storage_class(created))

    def remove_volume(self, claim: str) -> None:
        """Deletes the claim. Its storage goes once no pod uses it (the claim's protection
        finalizer), and with it the files where the storage class's reclaimPolicy is Delete."""
        self._delete("persistent_volume_claim", claim)

    def volume_usage(self, claim: str) -> int | None:
        return None  # only the storage sees into a claim: the API reports no usage

    def volume_directory(self, claim: str) -> str:
        return volumes.volume_directory(claim)

    # ----------------------------------------------------------------- logs and exec
    def logs(self, ref: ReplicaRef, *, tail_lines: int | None = None, since_seconds: int | None = None) -> str:
        """The replica's container output through the API (the same text as its output.log,
        after the entrypoint's and launcher's own lines); empty when the pod is gone."""
        arguments: dict[str, Any] = {"container": names.CONTAINER, "_preload_content": False}
        if tail_lines is not None:
            arguments["tail_lines"] = tail_lines
        if since_seconds is not None:
            arguments["since_seconds"] = since_seconds
        try:
            response = self.api.read_namespaced_pod_log(_pod_name(ref), self.settings.namespace, **arguments)
        except _API_ERRORS as error:
            if _status(error) in (400, 404):  # not started yet, or gone
                return ""
            raise _api_error(error, f"read the log of pod {_pod_name(ref)}") from None
        return response.data.decode("utf-8", errors="replace")

    def exec_stream(self, ref: ReplicaRef, command: Sequence[str], *, tty: bool = True) -> Any:
        """An interactive session in the replica's container (`kubernetes.stream.stream`'s
        WSClient, not yet read): the caller pumps stdin/stdout with `update`, `write_stdin`,
        `read_stdout` and closes it."""
        from kubernetes.stream import stream

        try:
            return stream(self.api.connect_get_namespaced_pod_exec, _pod_name(ref), self.settings.namespace,
                          container=names.CONTAINER, command=list(command), stdin=True, stdout=True,
                          stderr=not tty, tty=tty, _preload_content=False)
        except _API_ERRORS as error:
            raise _api_error(error, f"exec in pod {_pod_name(ref)}") from None

    # ----------------------------------------------------------------- internals
    def _find(self, ref: ReplicaRef) -> tuple[dict[str, Any] | None, bool]:
        name = _pod_name(ref)
        pod, deleted = self.cache.get(name)
        if pod is not None:
            return pod, deleted
        try:  # not seen by the watch yet (just created by another server, or the watch lags)
            found = self._call(f"read pod {name}", self.api.read_namespaced_pod, name, self.settings.namespace)
        except KubernetesError as error:
            if error.status == 404:
                return None, False
            raise
        self.cache.apply("ADDED", found)
        return found, False

    def _list_pods(self) -> tuple[list[dict[str, Any]], str]:
        listed = self._call("list pods", self.api.list_namespaced_pod, self.settings.namespace,
                            label_selector=names.SELECTOR)
        return listed.get("items", []), listed.get("metadata", {}).get("resourceVersion", "")

    def _watch_pods(self, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        from kubernetes import watch

        stream = watch.Watch().stream(self.api.list_namespaced_pod, self.settings.namespace,
                                      label_selector=names.SELECTOR, resource_version=version,
                                      allow_watch_bookmarks=True, timeout_seconds=WATCH_TIMEOUT_SECONDS,
                                      deserialize=False)
        for event in stream:
            yield event["type"], event["object"]

    def _janitor(self) -> None:
        while not self._janitor_stopped.wait(JANITOR_INTERVAL):
            try:
                self.collect_finished(time.time())
            except Exception:  # the next round tries again
                log.exception("deleting finished attempts failed")

    def collect_finished(self, now: float) -> list[str]:
        """Deletes the Service (and with it the Secret and pods) of every attempt whose pods
        have all ended more than `finished_retention_seconds` ago; returns their names."""
        listed = self._call("list services", self.api.list_namespaced_service, self.settings.namespace,
                            label_selector=names.SELECTOR)
        pods_by_attempt: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in self.cache.pods():
            labels = pod["metadata"].get("labels") or {}
            pods_by_attempt.setdefault((labels.get(names.JOB_LABEL), labels.get(names.ATTEMPT_LABEL)), []).append(pod)
        deleted = []
        retention = self.settings.finished_retention_seconds
        for service in listed.get("items", ()):
            labels = service["metadata"].get("labels") or {}
            pods = pods_by_attempt.get((labels.get(names.JOB_LABEL), labels.get(names.ATTEMPT_LABEL)), [])
            created = parse_time(service["metadata"].get("creationTimestamp")) or now
            if now - created < retention:
                continue  # also covers an attempt whose pods are still being created
            ended = [observe_pod(pod, now=now) for pod in pods]
            if any(not observation.is_gone for observation in ended):
                continue
            last = max((observation.finished_at or created for observation in ended), default=created)
            if now - last >= retention:
                self._delete("service", service["metadata"]["name"])
                deleted.append(service["metadata"]["name"])
        return deleted

    def _create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        from kubernetes import client

        model = {"service": client.V1Service, "secret": client.V1Secret, "pod": client.V1Pod}[kind]
        method = getattr(self.api, f"create_namespaced_{kind}")
        name = body["metadata"]["name"]
        try:
            response = method(self.settings.namespace, model.from_dict(body), _preload_content=False)
        except _API_ERRORS as error:
            if _status(error) == 409:
                raise KubernetesError(
                    f"{kind} {self.settings.namespace}/{name} already exists, left by an earlier mlyard database: "
                    f"delete it with `kubectl -n {self.settings.namespace} delete pods,services,secrets "
                    f"-l {names.JOB_LABEL}={body['metadata']['labels'][names.JOB_LABEL]}`") from None
            raise _api_error(error, f"create {kind} {self.settings.namespace}/{name}") from None
        return json.loads(response.data)

    def _delete(self, kind: str, name: str) -> None:
        method = getattr(self.api, f"delete_namespaced_{kind}")
        try:
            method(name, self.settings.namespace, propagation_policy="Background", _preload_content=False)
        except _API_ERRORS as error:
            if _status(error) != 404:
                raise _api_error(error, f"delete {kind} {self.settings.namespace}/{name}") from None

    def _delete_pod(self, name: str, *, grace: int | None) -> None:
        arguments: dict[str, Any] = {"_preload_content": False}
        if grace is not None:
            arguments["grace_period_seconds"] = grace
        try:
            self.api.delete_namespaced_pod(name, self.settings.namespace, **arguments)
        except _API_ERRORS as error:
            if _status(error) != 404:  # already gone: stopping twice is harmless
                raise _api_error(error, f"delete pod {self.settings.namespace}/{name}") from None

    @staticmethod
    def _call(action: str, method: Any, *arguments: Any, **keywords: Any) -> dict[str, Any]:
        """The API's JSON answer to `method`; its errors as KubernetesError."""
        try:
            response = method(*arguments, _preload_content=False, **keywords)
        except _API_ERRORS as error:
            raise _api_error(error, action) from None
        return json.loads(response.data)


def _pod_name(ref: ReplicaRef) -> str:
    return names.pod_name(*names.from_directory(ref.directory))


def _claim_request(claim: dict[str, Any], default: int) -> int:
    """The claim's storage request in bytes; the API writes it back as a quantity (50Gi)."""
    from kubernetes.utils import parse_quantity

    request = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    try:
        return int(parse_quantity(request)) if request is not None else default
    except ValueError:
        return default


def _terminated(pod: dict[str, Any]) -> bool:
    return any("terminated" in (c.get("state") or {}) for c in (pod.get("status") or {}).get("containerStatuses") or ())


def _status(error: Exception) -> int | None:
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


def _api_error(error: Exception, action: str) -> KubernetesError:
    """`error` (an ApiException, or a connection error) as one line that says what failed."""
    status = _status(error)
    message = None
    body = getattr(error, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = str(body)[:500]
    if status is None:
        result = KubernetesError(f"could not {action}: the Kubernetes API is unreachable ({error})")
    else:
        result = KubernetesError(f"could not {action}: Kubernetes answered {status}"
                                 f"{': ' + message if message else ' ' + str(getattr(error, 'reason', ''))}")
    result.status = status
    return result
