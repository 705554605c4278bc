"""A graceful stop while an upload is still arriving answers it 503 with Retry-After, not 500,
and leaves no unfinished upload behind."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from conftest import start_server, stop_server, wait_for

pytestmark = pytest.mark.slow


def test_a_graceful_stop_during_an_upload_answers_503(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home")
    try:
        pid = int((server.home / "server.pid").read_text().split()[0])
        request = (f"PUT /api/v1/snapshots/{'ab' * 32} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                   f"Authorization: Bearer {server.token()}\r\nContent-Type: application/gzip\r\n"
                   f"Content-Length: {10 * 1024 * 1024}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as upload:
            upload.sendall(request + b"\x1f\x8b" + b"\0" * 65536)  # then the client stalls mid-body
            os.kill(pid, signal.SIGTERM)
            answer = b""
            while b"\r\n\r\n" not in answer and (chunk := upload.recv(65536)):
                answer += chunk
        head = answer.split(b"\r\n\r\n")[0].decode().lower()
        assert head.startswith("http/1.1 503"), answer[:300]
        assert "retry-after: 5" in head
        assert wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30)
        assert list((server.home / "blobs" / "tmp").glob("*.partial")) == []
    finally:
        stop_server(server)
