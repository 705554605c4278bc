"""A stand-in for the part of the Kubernetes core API (`kubernetes.client.CoreV1Api`) that
mlyard's backend uses: pods, services, secrets, persistent volume claims, nodes and pod logs,
kept in memory.

One set of objects, two ways in:

- In process: `FakeCoreApi` has CoreV1Api's methods and answers as the API does with
  `_preload_content=False` (a response whose `data` is the JSON), raising the client's own
  ApiException for refusals. The backend takes it in place of a CoreV1Api.
- Over HTTP: `serve()` answers at `url`, so the real `kubernetes` client (request building,
  `_preload_content=False`, the watch stream) is exercised without a cluster; `requests`
  records what it was sent.

Every change of a pod is an event with the next resourceVersion (`publish` adds one), and
every watch gets each event after the resourceVersion it asked from, as from the real API
server, until its timeout (a watch of a client that has died takes nothing from the next one).

A `kubelet` (see tests/containers/stand_in_cluster.py), when given, is told of pods created,
asked to delete pods (it removes them once their containers have stopped) and serves pod logs.
Without one, a pod is deleted at once and tests set statuses, logs and events themselves.
Either way, deleting a Service deletes what it owns, as the garbage collector does.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

_NAMESPACED = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|services|secrets|persistentvolumeclaims)(?:/(?P<name>[^/]+))?(?P<log>/log)?$")
_SUCCESS = {"kind": "Status", "apiVersion": "v1", "status": "Success"}


class Kubelet(Protocol):
    def created(self, pod: dict[str, Any]) -> None:
        """The pod was just created (its object is the one the API keeps)."""

    def deleting(self, name: str, grace: int | None) -> dict[str, Any]:
        """A deletion of the pod was asked for, with that grace period (None: the pod's own)."""

    def log(self, name: str, tail_lines: int | None) -> bytes: ...


class Response:
    def __init__(self, payload: Any):
        self.data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def rfc3339_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_error(status: int, message: str) -> ApiException:
    """The client's exception for a refusal, its body the API's Status."""
    phrase = {404: "Not Found", 409: "Conflict", 403: "Forbidden"}.get(status, "Error")
    error = ApiException(status=status, reason=phrase)
    reason = {404: "NotFound", 409: "AlreadyExists", 403: "Forbidden"}.get(status, "InternalError")
    error.body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                             "reason": reason, "code": status})
    return error


def _selected(labels: dict[str, str] | None, selector: str | None) -> bool:
    wanted = dict(pair.split("=", 1) for pair in selector.split(",") if pair) if selector else {}
    return wanted.items() <= (labels or {}).items()


class FakeCoreApi:
    """`created`: the creationTimestamp of what it creates; None: the time of creation."""

    def __init__(self, created: str | None = None, *, kubelet: Kubelet | None = None):
        self.created = created
        self.default_storage_class: str | None = None
        """What the API server's DefaultStorageClass admission writes into a claim that names no class."""
        self.kubelet = kubelet
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.logs: dict[str, str] = {}
        self.refuse: dict[tuple[str, str], tuple[int, str]] = {}
        """(kind, name) → (status, message) the next create of it fails with."""
        self.calls: list[tuple[str, str]] = []
        """("create" or "delete", "kind/name") of every create and delete asked for."""
        self.deleted: list[tuple[str, str, int | None]] = []
        """(kind, name, grace period asked for) of every deletion of an object that existed."""
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every HTTP request."""
        self.published: list[tuple[str, dict[str, Any]]] = []
        """(kind, watch event) of every change, in order."""
        self.version = 1000
        self.lock = threading.Lock()
        self.url: str | None = None
        self._changed = threading.Condition(self.lock)
        self._closing = False
        self._httpd: ThreadingHTTPServer | None = None
        self._serializer = ApiClient()

    # ----------------------------------------------------------------- the objects
    def create(self, kind: str, namespace: str, document: dict[str, Any]) -> dict[str, Any]:
        name = document["metadata"]["name"]
        with self._changed:
            self.calls.append(("create", f"{kind}/{name}"))
            if (kind, name) in self.refuse:
                status, message = self.refuse.pop((kind, name))
                raise api_error(status, message)
            if (kind, name) in self.objects:
                raise api_error(409, f'{kind}s "{name}" already exists')
            self.version += 1
            document["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=str(self.version),
                                        creationTimestamp=self.created or rfc3339_now(), namespace=namespace)
            self.objects[(kind, name)] = document
            if kind == "pod":
                document["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
                self._record("pod", "ADDED", document)
            if kind == "persistentvolumeclaim":
                if self.default_storage_class and "storageClassName" not in document["spec"]:
                    document["spec"]["storageClassName"] = self.default_storage_class
                document["status"] = {"phase": "Pending"}
            answer = json.loads(json.dumps(document))
        if kind == "pod" and self.kubelet is not None:
            self.kubelet.created(document)
        return answer

    def read(self, kind: str, name: str) -> bytes:
        with self.lock:
            if (kind, name) not in self.objects:
                raise api_error(404, f'{kind}s "{name}" not found')
            return json.dumps(self.objects[(kind, name)]).encode()

    def list_of(self, kind: str, label_selector: str | None = None) -> bytes:
        with self.lock:  # the items and the version they are at, together
            items = [document for (k, _), document in self.objects.items()
                     if k == kind and _selected(document["metadata"].get("labels"), label_selector)]
            return json.dumps({"kind": f"{kind.title()}List", "apiVersion": "v1",
                               "metadata": {"resourceVersion": str(self.version)}, "items": items}).encode()

    def node_list(self) -> bytes:
        return json.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                           "items": self.nodes}).encode()

    def pod_log(self, name: str, tail_lines: int | None = None) -> bytes:
        with self.lock:
            if ("pod", name) not in self.objects:
                raise api_error(404, f'pods "{name}" not found')
        if self.kubelet is not None:
            return self.kubelet.log(name, tail_lines)
        lines = self.logs.get(name, "").splitlines(keepends=True)
        return "".join(lines[-tail_lines:] if tail_lines else lines).encode()

    def delete(self, kind: str, name: str, grace: int | None = None) -> dict[str, Any]:
        with self.lock:
            self.calls.append(("delete", f"{kind}/{name}"))
            if (kind, name) not in self.objects:
                raise api_error(404, f'{kind}s "{name}" not found')
            self.deleted.append((kind, name, grace))
        return self._delete(kind, name, grace)

    def _delete(self, kind: str, name: str, grace: int | None) -> dict[str, Any]:
        if kind == "pod" and self.kubelet is not None:
            return self.kubelet.deleting(name, grace)
        with self._changed:
            found = self.objects.pop((kind, name), None)
            if found is None:  # deleted meanwhile by another request
                return _SUCCESS
            if kind == "pod":
                self._publish("DELETED", found)
            uid = found["metadata"]["uid"]
            owned = [key for key, document in self.objects.items()
                     if any(owner.get("uid") == uid for owner in document["metadata"].get("ownerReferences") or ())]
        for owned_kind, owned_name in owned:  # the garbage collector
            self._delete(owned_kind, owned_name, None)
        return _SUCCESS

    # ----------------------------------------------------------------- events
    def publish(self, event: str, body: dict[str, Any]) -> None:
        """Gives the pod `body` the next resourceVersion and tells every watch of the `event`
        ("ADDED", "MODIFIED", "DELETED") with a copy of it."""
        with self._changed:
            self._publish(event, body)

    def _publish(self, event: str, body: dict[str, Any]) -> None:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self._record("pod", event, body)

    def _record(self, kind: str, event: str, body: dict[str, Any]) -> None:
        self.published.append((kind, {"type": event, "object": copy.deepcopy(body)}))
        self._changed.notify_all()

    def _events_after(self, kind: str, since: int, selector: str | None) -> list[dict[str, Any]]:
        return [event for k, event in self.published
                if k == kind and int(event["object"]["metadata"]["resourceVersion"]) > since
                and _selected(event["object"]["metadata"].get("labels"), selector)]

    # ----------------------------------------------------------------- CoreV1Api's methods
    def _create(self, kind: str, namespace: str, body: Any) -> Response:
        return Response(self.create(kind, namespace, self._serializer.sanitize_for_serialization(body)))

    def create_namespaced_service(self, namespace, body, **_):
        return self._create("service", namespace, body)

    def create_namespaced_secret(self, namespace, body, **_):
        return self._create("secret", namespace, body)

    def create_namespaced_pod(self, namespace, body, **_):
        return self._create("pod", namespace, body)

    def create_namespaced_persistent_volume_claim(self, namespace, body, **_):
        return self._create("persistentvolumeclaim", namespace, body)

    def read_namespaced_persistent_volume_claim(self, name, namespace, **_):
        return Response(self.read("persistentvolumeclaim", name))

    def delete_namespaced_persistent_volume_claim(self, name, namespace, **_):
        return Response(self.delete("persistentvolumeclaim", name))

    def read_namespaced_pod(self, name, namespace, **_):
        return Response(self.read("pod", name))

    def list_namespaced_pod(self, namespace, label_selector=None, **_):
        return Response(self.list_of("pod", label_selector))

    def list_namespaced_service(self, namespace, label_selector=None, **_):
        return Response(self.list_of("service", label_selector))

    def list_node(self, **_):
        return Response(self.node_list())

    def read_namespaced_pod_log(self, name, namespace, container=None, tail_lines=None, **_):
        return Response(self.pod_log(name, tail_lines))

    def delete_namespaced_pod(self, name, namespace, grace_period_seconds=None, **_):
        return Response(self.delete("pod", name, grace_period_seconds))

    def delete_namespaced_service(self, name, namespace, **_):
        return Response(self.delete("service", name))

    def delete_namespaced_secret(self, name, namespace, **_):
        return Response(self.delete("secret", name))

    # ----------------------------------------------------------------- over HTTP
    def serve(self) -> str:
        """Answers over HTTP until `close`; returns the URL, also kept in `url`."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self.url

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


def _handler(api: FakeCoreApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
            body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(self, method: str) -> None:
            api.requests.append((method, self.path))
            url = urlparse(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            try:
                if method == "GET" and url.path == "/api/v1/nodes":
                    return self._send(200, api.node_list())
                match = _NAMESPACED.match(url.path)
                if not match:
                    return self._send(404, {"kind": "Status", "code": 404, "message": url.path})
                kind, name = match["kind"][:-1], match["name"]
                if method == "POST":
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    return self._send(201, api.create(kind, match["ns"], body))
                if method == "DELETE":
                    grace = query.get("gracePeriodSeconds")
                    return self._send(200, api.delete(kind, name, int(grace) if grace is not None else None))
                if name and match["log"]:
                    tail = query.get("tailLines")
                    return self._send(200, api.pod_log(name, int(tail) if tail is not None else None), "text/plain")
                if name:
                    return self._send(200, api.read(kind, name))
                if query.get("watch") == "true":
                    return self._watch(kind, int(query.get("resourceVersion") or 0),
                                       float(query.get("timeoutSeconds", "300")), query.get("labelSelector"))
                return self._send(200, api.list_of(kind, query.get("labelSelector")))
            except ApiException as error:
                return self._send(error.status, error.body.encode())

        def do_GET(self):
            self._answer("GET")

        def do_POST(self):
            self._answer("POST")

        def do_DELETE(self):
            self._answer("DELETE")

        def _watch(self, kind: str, since: int, timeout: float, selector: str | None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + timeout
            try:
                while time.monotonic() < deadline and not api._closing:
                    with api._changed:
                        pending = api._events_after(kind, since, selector)
                        if not pending:
                            api._changed.wait(0.5)
                            continue
                    for event in pending:
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        since = int(event["object"]["metadata"]["resourceVersion"])
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")  # the watch's timeout: the stream ends
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client is gone

    return Handler
