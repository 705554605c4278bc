"""The controller's queries and the job lookups read through indexes, on SQLite and PostgreSQL:
each statement a pass runs is captured and explained, and none may scan a table that grows
with the jobs."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event

from mlyard.server.services import jobs
from mlyard.server.services.nodes import record_nodes
from mlyard.server.store.db import Database
from test_rounds import ADMIN, make_world, submit

GROWING = ("jobs", "attempts", "replicas", "job_events", "api_tokens", "idempotency_keys")
"""Tables whose size follows the jobs ever run; nodes, queues, projects and users stay small."""


def captured(database: Database) -> list[tuple[str, object]]:
    statements: list[tuple[str, object]] = []

    def before(_connection, _cursor, statement, parameters, _context, executemany) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
            statements.append((statement, parameters[0] if executemany else parameters))
    event.listen(database.engine, "before_cursor_execute", before)
    return statements


def scans(database: Database, statement: str, parameters) -> list[str]:
    """The plan's lines that read a growing table whole."""
    with database.engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            # Tables this small would be scanned anyway; what is asked is whether an index serves.
            connection.exec_driver_sql("SET enable_seqscan = off")
            lines = [row[0] for row in connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)]
            return [line for line in lines if "Seq Scan on" in line and line.split("Seq Scan on ")[1].split()[0]
                    in GROWING]
        lines = [row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]
        if "ORDER BY jobs.id DESC" in statement and "LIMIT" in statement:
            # A table of SQLite is stored in the order of its integer key: reading it from the
            # newest end and stopping at the limit is the keyset read a page needs.
            lines = [line for line in lines if line != "SCAN jobs"]
        return [line for line in lines if line.startswith("SCAN ") and "USING" not in line
                and line.split()[1] in GROWING]


def test_the_hot_queries_use_indexes(tmp_path: Path, database_url: str) -> None:
    database, backend, controller = make_world(tmp_path, database_url, cpus=2)
    running = submit(database)
    statements = captured(database)
    # The first pass loads the waiting jobs and the run times of those that succeeded: reads by status.
    controller.reconcile_once()
    controller.reconcile_once()
    waiting = [submit(database) for _ in range(3)]
    controller.reconcile_once()  # the changed jobs, the running attempt, the waiting reasons
    jobs.cancel(database, ADMIN, waiting[0], wake=lambda: None)
    backend.exit(backend.launches[0], 0, 0)
    backend.exit(backend.launches[0], 1, 0)
    record_nodes(database, backend.name, backend.nodes())
    for _ in range(3):
        controller.reconcile_once()
    jobs.get_job(database, ADMIN, running)
    jobs.list_jobs(database, ADMIN)
    assert len(statements) > 10
    fresh = Database(database.url)
    try:
        found = {statement: scans(fresh, statement, parameters) for statement, parameters in statements}
    finally:
        fresh.close()
    assert not {statement: lines for statement, lines in found.items() if lines}
    database.close()
