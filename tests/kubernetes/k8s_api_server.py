"""A small HTTP server answering the part of the Kubernetes API the backend uses, so the real
`kubernetes` client (request building, `_preload_content=False`, the watch stream) is
exercised without a cluster. Objects live in memory; a watch streams what `events` holds
for it, then ends, as the API server does at a watch's timeout.

A `kubelet` (see tests/containers/stand_in_cluster.py), when set, is told of pods created and
deletions asked for, and serves pod logs; without one, tests set objects and events themselves.
What a kubelet changes it `publish`es: those events are kept, and every watch gets each one
after the resourceVersion it asked from, as from the real API server (a watch of a client
that has died takes nothing from the next one)."""

from __future__ import annotations

import copy
import json
import queue
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_NAMESPACED = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|services|secrets)(?:/(?P<name>[^/]+))?(?P<log>/log)?$")


class FakeApiServer:
    def __init__(self):
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.events: queue.Queue = queue.Queue()
        self.version = 100
        self.lock = threading.Lock()
        self.kubelet: Any = None
        self.published: list[dict[str, Any]] = []
        self._changed = threading.Condition(self.lock)
        self._closing = False
        server = self

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

            def _not_found(self, kind: str, name: str) -> None:
                self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "message": f'{kind} "{name}" not found', "reason": "NotFound", "code": 404})

            def do_GET(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                server.requests.append(("GET", self.path))
                if url.path == "/api/v1/nodes":
                    return self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                            "items": server.nodes})
                match = _NAMESPACED.match(url.path)
                if not match:
                    return self._send(404, {"kind": "Status", "code": 404, "message": url.path})
                kind, name = match["kind"][:-1], match["name"]
                if name and match["log"]:
                    if (kind, name) not in server.objects:
                        return self._not_found("pods", name)
                    text = server.kubelet.log(name, query) if server.kubelet else f"log of {name}\n".encode()
                    return self._send(200, text, "text/plain")
                if name:
                    with server.lock:
                        found = copy.deepcopy(server.objects.get((kind, name)))
                    if found is None:
                        return self._not_found(match["kind"], name)
                    return self._send(200, found)
                if query.get("watch") == ["true"]:
                    if server.kubelet:
                        return self._watch_published(int(query.get("resourceVersion", ["0"])[0] or 0),
                                                     float(query.get("timeoutSeconds", ["300"])[0]))
                    return self._watch()
                wanted = dict(p.split("=", 1) for p in query.get("labelSelector", [""])[0].split(",") if p)
                with server.lock:  # the items and the version they are at, together
                    items = [o for (k, _), o in server.objects.items()
                             if k == kind and wanted.items() <= o["metadata"].get("labels", {}).items()]
                    listed = json.dumps({"kind": "List", "apiVersion": "v1",
                                         "metadata": {"resourceVersion": str(server.version)}, "items": items})
                return self._send(200, listed.encode())

            def _watch(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    try:
                        event = server.events.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    if event is None:  # the watch's timeout: the stream ends
                        break
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def _watch_published(self, since: int, timeout: float):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + timeout
                try:
                    while time.monotonic() < deadline and not server._closing:
                        with server._changed:
                            pending = [event for event in server.published
                                       if int(event["object"]["metadata"]["resourceVersion"]) > since]
                            if not pending:
                                server._changed.wait(0.5)
                                continue
                        for event in pending:
                            line = json.dumps(event).encode() + b"\n"
                            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                            since = int(event["object"]["metadata"]["resourceVersion"])
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client is gone

            def do_POST(self):
                server.requests.append(("POST", self.path))
                match = _NAMESPACED.match(urlparse(self.path).path)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                kind, name = match["kind"][:-1], body["metadata"]["name"]
                with server.lock:
                    if (kind, name) in server.objects:
                        return self._send(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                                                "message": f'{match["kind"]} "{name}" already exists'})
                    server.version += 1
                    body["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=str(server.version),
                                            creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                            namespace=match["ns"])
                    if kind == "pod":
                        body["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
                    server.objects[(kind, name)] = body
                if server.kubelet:
                    server.kubelet.created(kind, body)
                return self._send(201, body)

            def do_DELETE(self):
                server.requests.append(("DELETE", self.path))
                url = urlparse(self.path)
                match = _NAMESPACED.match(url.path)
                kind, name = match["kind"][:-1], match["name"]
                if (kind, name) not in server.objects:
                    return self._not_found(match["kind"], name)
                if server.kubelet:
                    return self._send(200, server.kubelet.deleting(kind, name, parse_qs(url.query)))
                return self._send(200, server.objects.pop((kind, name)))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def publish(self, kind: str, body: dict[str, Any]) -> None:
        """Gives `body` the next resourceVersion and tells every watch of it (a copy)."""
        with self._changed:
            self.version += 1
            body["metadata"]["resourceVersion"] = str(self.version)
            self.published.append({"type": kind, "object": copy.deepcopy(body)})
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self.events.put(None)
        self.httpd.shutdown()
        self.httpd.server_close()
