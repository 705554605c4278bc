"""A client process for the durability tests: submits COUNT jobs named PREFIX-i from THREADS
threads with `Client.submit` (an Idempotency-Key per job, retried across a server restart) and
appends `name key job_id` to OUT for every job the server answered with 201."""

from __future__ import annotations

import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from mlyard.client import Client, ClientError


def main(url: str, token: str, prefix: str, count: int, threads: int, out: str) -> int:
    lock = threading.Lock()
    failures: list[str] = []
    local = threading.local()

    def client() -> Client:
        if not hasattr(local, "client"):
            local.client = Client(url, token, timeout=30, retry_seconds=120)
            local.client.health()  # reached once: later connection errors mean a restart, and are retried
        return local.client

    def submit(index: int) -> None:
        name = f"{prefix}-{index}"
        key = str(uuid.uuid4())
        spec = {"name": name, "command": ["true"], "queue": "hold", "roles": [{"resources": {"memory": "64Mi"}}]}
        try:
            job = client().submit(spec, idempotency_key=key)
        except ClientError as error:
            with lock:
                failures.append(f"{name}: {error}")
            return
        with lock, open(out, "a") as handle:
            handle.write(f"{name} {key} {job.id}\n")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(submit, range(count)))
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    url, token, prefix, count, threads, out = sys.argv[1:]
    sys.exit(main(url, token, prefix, int(count), int(threads), out))
