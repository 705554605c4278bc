"""Server settings from the environment: the scheduling policy and its preemption knobs, and
the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from mlyard.errors import MlyardError
from mlyard.scheduler import LIVE_POLICIES
from mlyard.server.store.db import Database, normalize_url
from mlyard.server.settings import ServerSettings


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for variable in ("MLYARD_SCHEDULER_POLICY", "MLYARD_PREEMPT_MIN_RUN", "MLYARD_PREEMPTION_BUDGET",
                     "MLYARD_DATABASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MLYARD_HOME", str(tmp_path))
    return monkeypatch


def test_the_default_is_the_balanced_policy_with_five_minutes_before_a_preemption(environment) -> None:
    config = ServerSettings.from_environment().scheduler_config()
    assert (config.policy, config.min_run_before_preempt) == ("balanced", 300)


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("0s", 0.0), ("90", 90.0), ("10m", 600.0)])
def test_the_policy_and_the_minimum_run_come_from_the_environment(environment, value: str, seconds: float) -> None:
    environment.setenv("MLYARD_SCHEDULER_POLICY", "priority")
    environment.setenv("MLYARD_PREEMPT_MIN_RUN", value)
    config = ServerSettings.from_environment().scheduler_config()
    assert (config.policy, config.min_run_before_preempt) == ("priority", seconds)


@pytest.mark.parametrize("policy", ["srtf-oracle", "lottery"])
def test_a_policy_the_server_cannot_run_is_refused_naming_the_variable_and_the_choices(environment, policy) -> None:
    environment.setenv("MLYARD_SCHEDULER_POLICY", policy)
    with pytest.raises(MlyardError) as raised:
        ServerSettings.from_environment()
    message = str(raised.value)
    assert "MLYARD_SCHEDULER_POLICY" in message and policy in message and ", ".join(LIVE_POLICIES) in message
    assert "\n" not in message


def test_there_is_no_preemption_budget_unless_the_environment_sets_one(environment) -> None:
    assert ServerSettings.from_environment().scheduler_config().preemption_budget is None
    environment.setenv("MLYARD_PREEMPTION_BUDGET", "3")
    assert ServerSettings.from_environment().scheduler_config().preemption_budget == 3
    for bad in ("-1", "two", "2000000", "²", "٣"):
        environment.setenv("MLYARD_PREEMPTION_BUDGET", bad)
        with pytest.raises(MlyardError, match="MLYARD_PREEMPTION_BUDGET"):
            ServerSettings.from_environment()


def test_an_unreadable_minimum_run_is_refused_naming_the_variable(environment) -> None:
    environment.setenv("MLYARD_PREEMPT_MIN_RUN", "soon")
    with pytest.raises(MlyardError, match="MLYARD_PREEMPT_MIN_RUN"):
        ServerSettings.from_environment()


@pytest.mark.parametrize(("given", "used"), [
    ("postgres://u:p%40ss@db:5432/mlyard?sslmode=require", "postgresql+psycopg://u:p%40ss@db:5432/mlyard?sslmode=require"),
    ("postgresql://db/mlyard", "postgresql+psycopg://db/mlyard"),
    ("postgresql+psycopg://db/mlyard", "postgresql+psycopg://db/mlyard"),
    ("sqlite:////var/lib/mlyard.db", "sqlite:////var/lib/mlyard.db"),
])
def test_plain_postgresql_urls_get_the_psycopg_driver(given: str, used: str) -> None:
    assert normalize_url(given) == used


def test_the_database_url_comes_from_the_environment_in_any_accepted_form(environment, database_url: str) -> None:
    plain = database_url.replace("postgresql+psycopg://", "postgres://")
    environment.setenv("MLYARD_DATABASE_URL", plain)
    settings = ServerSettings.from_environment()
    assert settings.effective_database_url == plain
    database = Database.open(settings.effective_database_url)
    try:
        assert database.url == database_url
        with database.transaction() as session:
            assert session.scalar(text("SELECT 1")) == 1
    finally:
        database.close()


def test_without_a_url_the_database_is_sqlite_in_the_home(environment, tmp_path: Path) -> None:
    assert ServerSettings.from_environment().effective_database_url == f"sqlite:///{tmp_path / 'mlyard.db'}"


def test_web_sessions_are_bound_to_their_address_unless_switched_off(environment) -> None:
    assert ServerSettings.from_environment().session_bind_address is True
    environment.setenv("MLYARD_SESSION_BIND_ADDRESS", "off")
    assert ServerSettings.from_environment().session_bind_address is False
    environment.setenv("MLYARD_SESSION_BIND_ADDRESS", "sometimes")
    with pytest.raises(MlyardError, match="MLYARD_SESSION_BIND_ADDRESS='sometimes': choose on or off"):
        ServerSettings.from_environment()
