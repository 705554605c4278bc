"""A stand-in for `kubernetes.client.CoreV1Api` at the backend's boundary: it keeps objects
in memory and answers as the API does with `_preload_content=False` (a response whose `data`
is the JSON), raising the client's own ApiException for refusals."""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException


class Response:
    def __init__(self, payload: Any):
        self.data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def rfc3339_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeCoreApi:
    """`created`: the creationTimestamp of what it creates; None: the time of creation."""

    def __init__(self, created: str | None = None):
        self.created = created
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str, int | None]] = []
        self.nodes: list[dict[str, Any]] = []
        self.logs: dict[str, str] = {}
        self.refuse: dict[tuple[str, str], tuple[int, str]] = {}
        """(kind, name) → (status, message) the next create of it fails with."""
        self._versions = itertools.count(1000)
        self._serializer = ApiClient()

    # ----------------------------------------------------------------- create
    def _create(self, kind: str, namespace: str, body: Any) -> Response:
        document = self._serializer.sanitize_for_serialization(body)
        name = document["metadata"]["name"]
        self.calls.append(("create", f"{kind}/{name}"))
        if (kind, name) in self.refuse:
            status, message = self.refuse.pop((kind, name))
            raise _error(status, message)
        if (kind, name) in self.objects:
            raise _error(409, f'{kind}s "{name}" already exists')
        document["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=str(next(self._versions)),
                                    creationTimestamp=self.created or rfc3339_now(), namespace=namespace)
        if kind == "pod":
            document["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        self.objects[(kind, name)] = document
        return Response(document)

    def create_namespaced_service(self, namespace, body, **_):
        return self._create("service", namespace, body)

    def create_namespaced_secret(self, namespace, body, **_):
        return self._create("secret", namespace, body)

    def create_namespaced_pod(self, namespace, body, **_):
        return self._create("pod", namespace, body)

    # ----------------------------------------------------------------- read
    def read_namespaced_pod(self, name, namespace, **_):
        if ("pod", name) not in self.objects:
            raise _error(404, f'pods "{name}" not found')
        return Response(self.objects[("pod", name)])

    def _list(self, kind: str, label_selector: str | None) -> Response:
        wanted = dict(pair.split("=", 1) for pair in label_selector.split(",")) if label_selector else {}
        items = [document for (k, _), document in self.objects.items() if k == kind
                 and wanted.items() <= (document["metadata"].get("labels") or {}).items()]
        return Response({"kind": f"{kind.title()}List", "metadata": {"resourceVersion": str(next(self._versions))},
                         "items": items})

    def list_namespaced_pod(self, namespace, label_selector=None, **_):
        return self._list("pod", label_selector)

    def list_namespaced_service(self, namespace, label_selector=None, **_):
        return self._list("service", label_selector)

    def list_node(self, **_):
        return Response({"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": self.nodes})

    def read_namespaced_pod_log(self, name, namespace, container=None, tail_lines=None, **_):
        if ("pod", name) not in self.objects:
            raise _error(404, f'pods "{name}" not found')
        lines = self.logs.get(name, "").splitlines(keepends=True)
        return Response("".join(lines[-tail_lines:] if tail_lines else lines).encode())

    # ----------------------------------------------------------------- delete
    def _delete(self, kind: str, name: str, grace: int | None) -> Response:
        self.calls.append(("delete", f"{kind}/{name}"))
        if (kind, name) not in self.objects:
            raise _error(404, f'{kind}s "{name}" not found')
        self.deleted.append((kind, name, grace))
        document = self.objects.pop((kind, name))
        if kind == "service":  # the garbage collector: what the Service owns goes with it
            uid = document["metadata"]["uid"]
            for key, owned in list(self.objects.items()):
                if any(reference["uid"] == uid for reference in owned["metadata"].get("ownerReferences", ())):
                    del self.objects[key]
        return Response({"kind": "Status", "status": "Success"})

    def delete_namespaced_pod(self, name, namespace, grace_period_seconds=None, **_):
        return self._delete("pod", name, grace_period_seconds)

    def delete_namespaced_service(self, name, namespace, **_):
        return self._delete("service", name, None)

    def delete_namespaced_secret(self, name, namespace, **_):
        return self._delete("secret", name, None)


def _error(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason={404: "Not Found", 409: "Conflict", 403: "Forbidden"}.get(status, "Error"))
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return error
