"""The API against its own OpenAPI document: schemathesis generates requests for every
operation (valid ones and invalid ones) against a real server, and every answer must be no
5xx, a documented status code and content type, and a body that matches the documented schema.

The cases are drawn with Hypothesis directly from each operation's strategy, so the test does
not depend on schemathesis' pytest plugin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.slow]

EXAMPLES = 40
"""Per operation, generation mode and database: about 2,500 requests per database in all."""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module", params=DATABASES)
def fuzzed_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # One CPU: whatever jobs the generated submissions queue run one at a time.
    running = start_server(tmp_path_factory.mktemp(f"mlyard-fuzz-{request.param}"), database=request.param,
                           MLYARD_NODE_CPUS="1", MLYARD_SAMPLE_INTERVAL="0")
    yield running
    stop_server(running)


def _failures(operation, mode: GenerationMode, headers: dict[str, str]) -> list[str]:
    found: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        # Negative cases may carry a random Host header, which no operation documents: the server's
        # allowed-hosts check answers it 400 before any route (tests/security covers that check).
        for name in [name for name in (case.headers or {}) if name.lower() == "host"]:
            del case.headers[name]
        try:
            case.call_and_validate(headers=headers, checks=CHECKS)
        except (AssertionError, FailureGroup) as error:  # schemathesis' failures: keep the first few, go on
            if len(found) < 3:
                found.append(f"{operation.label} ({mode.value}): {str(error).strip()[:1500]}")

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid: an operation without parameters or body
        assert mode is GenerationMode.NEGATIVE
    return found


def test_every_answer_is_documented_and_no_server_error(fuzzed_server: RunningServer) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzzed_server.url}/api/v1/openapi.json")
    headers = {"Authorization": f"Bearer {fuzzed_server.token()}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 20
    for operation in operations:
        for mode in GenerationMode:
            failures += _failures(operation, mode, headers)
    assert not failures, "\n\n".join(failures)
