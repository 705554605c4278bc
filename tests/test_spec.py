"""The job specification: quantities, validation with locations, and the job lifecycle."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mlyard.spec import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATUSES,
    JobSpec,
    JobStatus,
    Resources,
    can_transition,
    dataset_variable,
    parse_duration,
    parse_memory,
    volume_variable,
)


def spec(**fields: Any) -> JobSpec:
    fields.setdefault("name", "train")
    fields.setdefault("command", "python train.py")
    return JobSpec.model_validate(fields)


def error_locations(**fields: Any) -> list[tuple[Any, ...]]:
    with pytest.raises(ValidationError) as caught:
        spec(**fields)
    return [tuple(error["loc"]) for error in caught.value.errors()]


def error_messages(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        spec(**fields)
    return " | ".join(error["msg"] for error in caught.value.errors())


# --------------------------------------------------------------------------- parse_memory


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512Mi", 512 * 1024**2),
        ("2Gi", 2 * 1024**3),
        ("1.5GB", 1_500_000_000),
        ("4g", 4_000_000_000),
        ("100k", 100_000),
        ("1KiB", 1024),
        ("1Ti", 1024**4),
        (" 64 Mi ", 64 * 1024**2),
        ("12345", 12345),
    ],
)
def test_parse_memory_reads_decimal_and_binary_quantities(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


def test_parse_memory_takes_plain_numbers_as_bytes() -> None:
    assert parse_memory(4096) == 4096
    assert isinstance(parse_memory(4096), int)
    assert parse_memory(2.0 * 1024) == 2048


@pytest.mark.parametrize("bad", ["", "lots", "2Xi", "Gi", "-1Gi", "1.2.3Mi", "2 G i", "0Mi", 0, -5, True])
def test_parse_memory_rejects_unreadable_or_non_positive_values(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_memory(bad)


def test_parse_memory_error_names_the_value_and_an_example() -> None:
    with pytest.raises(ValueError, match=r"'lots'.*2Gi"):
        parse_memory("lots")


# --------------------------------------------------------------------------- parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0), ("1.5h", 5400.0), ("45", 45.0), (30, 30.0)],
)
def test_parse_duration_reads_seconds_minutes_hours_and_days(text: Any, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["", "soon", "10x", "10 min", "-5m", "0s", 0, -1, False])
def test_parse_duration_rejects_unreadable_or_non_positive_values(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


# --------------------------------------------------------------------------- JobSpec defaults


def test_minimal_spec_has_one_worker_role_with_one_replica_and_one_cpu() -> None:
    job = spec()
    assert [role.name for role in job.roles] == ["worker"]
    assert job.roles[0].replicas == 1
    assert job.roles[0].resources.cpu == 1.0
    assert job.roles[0].resources.gpu == 0
    assert job.roles[0].resources.memory == 1024**3
    assert job.replica_count == 1
    assert job.framework == "none"
    assert job.queue == "default"
    assert job.max_runtime is None
    assert job.elastic is None


def test_string_command_runs_through_the_shell() -> None:
    job = spec(command="python train.py && echo done")
    assert job.command == ["/bin/sh", "-c", "python train.py && echo done"]
    assert job.display_command() == "python train.py && echo done"


def test_list_command_is_kept_as_argv() -> None:
    job = spec(command=["python", "train.py", "--lr", "0.1 0.2"])
    assert job.command == ["python", "train.py", "--lr", "0.1 0.2"]
    assert job.display_command() == "python train.py --lr '0.1 0.2'"


def test_role_command_overrides_job_command_for_that_role_only() -> None:
    job = spec(roles=[{"name": "chief", "command": "python chief.py"}, {"name": "worker"}])
    assert job.command_for(job.roles[0]) == ["/bin/sh", "-c", "python chief.py"]
    assert job.command_for(job.roles[1]) == job.command


@pytest.mark.parametrize("command", ["", "   ", [], [""], ["  ", "x"], [1, 2], None, 42])
def test_empty_or_malformed_command_is_rejected_at_command(command: Any) -> None:
    assert ("command",) in error_locations(command=command)


def test_empty_role_command_is_rejected_at_its_location() -> None:
    assert ("roles", 0, "command") in error_locations(roles=[{"command": []}])


def test_missing_name_and_command_are_reported() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({})
    locations = {tuple(error["loc"]) for error in caught.value.errors()}
    assert {("name",), ("command",)} <= locations


# --------------------------------------------------------------------------- unknown fields


def test_unknown_top_level_field_is_rejected_with_its_location() -> None:
    with pytest.raises(ValidationError) as caught:
        spec(comand="typo")
    errors = caught.value.errors()
    assert [(tuple(error["loc"]), error["type"]) for error in errors] == [(("comand",), "extra_forbidden")]


def test_unknown_nested_field_is_rejected_with_its_full_location() -> None:
    locations = error_locations(roles=[{"name": "worker"}, {"name": "ps", "resources": {"gpus": 1}}])
    assert locations == [("roles", 1, "resources", "gpus")]


# --------------------------------------------------------------------------- replicas and roles


@pytest.mark.parametrize("replicas", [0, -1, 1025])
def test_replica_count_out_of_range_is_rejected_at_the_roles_replicas(replicas: int) -> None:
    assert error_locations(roles=[{"replicas": replicas}]) == [("roles", 0, "replicas")]


def test_replica_count_sums_over_roles() -> None:
    job = spec(roles=[{"name": "chief"}, {"name": "worker", "replicas": 3}, {"name": "ps", "replicas": 2}])
    assert job.replica_count == 6


def test_empty_role_list_is_rejected() -> None:
    assert error_locations(roles=[]) == [("roles",)]


def test_duplicate_role_names_are_rejected_and_named() -> None:
    message = error_messages(roles=[{"name": "worker"}, {"name": "ps"}, {"name": "worker"}])
    assert "unique" in message
    assert "worker" in message


@pytest.mark.parametrize("name", ["Worker", "-worker", "worker-", "w_1", "", "a" * 64])
def test_role_name_must_be_a_lowercase_dns_label(name: str) -> None:
    assert error_locations(roles=[{"name": name}]) == [("roles", 0, "name")]


@pytest.mark.parametrize("name", ["My-Job", "job_1", "", "-job"])
def test_job_name_must_be_a_lowercase_dns_label(name: str) -> None:
    assert error_locations(name=name) == [("name",)]


# --------------------------------------------------------------------------- env


@pytest.mark.parametrize("key", ["1ABC", "MY-VAR", "A B", "", "X=Y"])
def test_invalid_environment_variable_name_is_rejected(key: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(env={"GOOD": "1", key: "value"})
    errors = caught.value.errors()
    assert [tuple(error["loc"]) for error in errors] == [("env",)]
    assert repr(key) in errors[0]["msg"]


def test_valid_environment_variable_names_are_accepted() -> None:
    job = spec(env={"_PRIVATE": "1", "LR": "0.1", "a1": "x"})
    assert job.env == {"_PRIVATE": "1", "LR": "0.1", "a1": "x"}


# --------------------------------------------------------------------------- elastic


def test_elastic_min_above_max_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        spec(elastic={"min_replicas": 4, "max_replicas": 2})
    errors = caught.value.errors()
    assert [tuple(error["loc"]) for error in errors] == [("elastic",)]
    assert "min_replicas must not exceed max_replicas" in errors[0]["msg"]


def test_elastic_range_is_accepted_when_min_not_above_max() -> None:
    job = spec(elastic={"min_replicas": 2, "max_replicas": 2})
    assert (job.elastic.min_replicas, job.elastic.max_replicas) == (2, 2)


def test_elastic_job_with_two_roles_is_rejected() -> None:
    assert "exactly one role" in error_messages(
        elastic={"min_replicas": 1, "max_replicas": 4}, roles=[{"name": "chief"}, {"name": "worker"}]
    )


# --------------------------------------------------------------------------- resources


def test_memory_quantity_in_a_role_is_parsed_to_bytes() -> None:
    job = spec(roles=[{"resources": {"memory": "512Mi", "cpu": 2, "gpu": 1}}])
    assert job.roles[0].resources.memory == 512 * 1024**2
    assert job.roles[0].resources.gpu == 1


def test_bad_memory_quantity_is_rejected_at_its_location() -> None:
    assert error_locations(roles=[{"resources": {"memory": "lots"}}]) == [("roles", 0, "resources", "memory")]


@pytest.mark.parametrize("cpu", [0, -1, 5000])
def test_cpu_out_of_range_is_rejected(cpu: float) -> None:
    assert error_locations(roles=[{"resources": {"cpu": cpu}}]) == [("roles", 0, "resources", "cpu")]


@pytest.mark.parametrize(("cpu", "whole"), [(0.1, 0), (0.5, 0), (1, 1), (1.5, 2), (2.0, 2), (2.01, 3)])
def test_whole_cpus_round_up_and_a_request_below_a_core_pins_none(cpu: float, whole: int) -> None:
    assert Resources(cpu=cpu).whole_cpus == whole


def test_a_cpu_request_is_counted_in_millicores_down_to_one() -> None:
    assert Resources(cpu=0.25).millicores == 250
    assert error_locations(roles=[{"resources": {"cpu": 0.0001}}]) == [("roles", 0, "resources", "cpu")]


def test_processes_success_policy_and_placement_are_checked_where_they_are_written() -> None:
    assert error_locations(roles=[{"processes": 0}]) == [("roles", 0, "processes")]
    assert error_locations(success_policy="first") == [("success_policy",)]
    assert error_locations(success_policy="chief") == [()], "a chief policy needs a chief role"
    assert error_locations(placement={"same_rack": True}) == [("placement", "same_rack")]
    assert error_locations(placement={"same_topology": "rack; rm"}) == [("placement", "same_topology")]
    assert error_locations(framework="tensorflow", roles=[{"processes": 2}]) == [()]


# --------------------------------------------------------------------------- other fields


def test_max_runtime_accepts_a_duration_string() -> None:
    assert spec(max_runtime="10m").max_runtime == 600.0
    assert error_locations(max_runtime="forever") == [("max_runtime",)]


def test_preemption_grace_is_an_optional_duration() -> None:
    assert spec().preemption_grace is None
    assert spec(preemption_grace="2m").preemption_grace == 120.0
    assert error_locations(preemption_grace="0") == [("preemption_grace",)]


def test_a_job_is_a_batch_job_unless_it_says_it_is_interactive() -> None:
    job = spec()
    assert (job.interactive, job.idle_timeout) == (False, None)
    assert spec(interactive=True).idle_timeout is None  # the server's timeout applies


@pytest.mark.parametrize(("value", "seconds"), [("15s", 15.0), ("30m", 1800.0), (90, 90.0), ("0", 0.0), (0, 0.0)])
def test_the_idle_timeout_of_an_interactive_job_is_a_duration_where_0_means_never(value: Any, seconds: float) -> None:
    assert spec(interactive=True, idle_timeout=value).idle_timeout == seconds


@pytest.mark.parametrize("value", ["soon", -5, "1w", True])
def test_an_unreadable_idle_timeout_is_rejected_at_its_field(value: Any) -> None:
    assert error_locations(interactive=True, idle_timeout=value) == [("idle_timeout",)]


def test_an_idle_timeout_on_a_batch_job_is_rejected_at_its_field_saying_why() -> None:
    assert error_locations(idle_timeout="15m") == [("idle_timeout",)]
    assert "interactive" in error_messages(interactive=False, idle_timeout="15m")
    assert error_locations(interactive="sometimes") == [("interactive",)]


def test_snapshot_must_be_a_sha256_hex_digest() -> None:
    digest = "ab" * 32
    assert spec(snapshot=digest).snapshot == digest
    assert error_locations(snapshot="AB" * 32) == [("snapshot",)]
    assert error_locations(snapshot="ab" * 31) == [("snapshot",)]


def test_unknown_framework_is_rejected() -> None:
    assert error_locations(framework="jax") == [("framework",)]


def test_spec_is_frozen() -> None:
    job = spec()
    with pytest.raises(ValidationError):
        job.name = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- lifecycle


def test_every_status_has_a_transition_entry() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(JobStatus)


@pytest.mark.parametrize("terminal", sorted(TERMINAL_STATUSES, key=lambda status: status.value))
def test_terminal_statuses_have_no_transitions(terminal: JobStatus) -> None:
    assert terminal.is_terminal
    assert not terminal.is_active
    assert not any(can_transition(terminal, target) for target in JobStatus)


def test_terminal_statuses_are_succeeded_failed_cancelled() -> None:
    assert TERMINAL_STATUSES == {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}


def test_queued_cannot_jump_to_running() -> None:
    assert not can_transition(JobStatus.QUEUED, JobStatus.RUNNING)
    assert can_transition(JobStatus.QUEUED, JobStatus.SCHEDULED)


def test_running_can_succeed_fail_be_cancelled_or_preempted() -> None:
    for target in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PREEMPTED):
        assert can_transition(JobStatus.RUNNING, target)
    assert not can_transition(JobStatus.RUNNING, JobStatus.QUEUED)


def test_a_preempted_job_goes_back_to_the_queue_even_before_it_ran() -> None:
    assert can_transition(JobStatus.STARTING, JobStatus.PREEMPTED)
    assert can_transition(JobStatus.PREEMPTED, JobStatus.QUEUED)


def test_no_status_transitions_to_itself() -> None:
    assert not any(can_transition(status, status) for status in JobStatus)


def test_every_non_terminal_status_can_reach_a_terminal_one() -> None:
    for start in JobStatus:
        seen, frontier = {start}, [start]
        while frontier:
            for target in ALLOWED_TRANSITIONS[frontier.pop()]:
                if target not in seen:
                    seen.add(target)
                    frontier.append(target)
        assert seen & TERMINAL_STATUSES, start


def test_active_statuses_are_those_with_processes() -> None:
    active = {status for status in JobStatus if status.is_active}
    assert active == {JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING}, "a RESTARTING job waits out its backoff"


@pytest.mark.parametrize("datasets, says", [
    ([{"name": "digits", "path": "data/../etc"}], "not a relative path of plain names"),
    ([{"name": "digits", "path": "/abs"}], "not a relative path of plain names"),
    ([{"name": "digits", "path": ".git"}], "not a relative path of plain names"),
    ([{"name": "digits", "version": "V2"}], "datasets.0.version"),
    ([{"name": "digits", "version": "v1; rm"}], "datasets.0.version"),
    ([{"name": "digits", "version": "x!!latest"}], "datasets.0.version"),
    ([{"name": "digits"}, {"name": "digits", "project": "other", "path": "x"}], "digits named twice"),
    ([{"name": "a", "path": "data"}, {"name": "b", "path": "data/b"}], "'data/b' lies in 'data'"),
    ([{"name": "a", "fingerprint": "abc"}], "datasets.0.fingerprint"),
])
def test_dataset_inputs_that_would_collide_or_escape_are_refused(datasets: list, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"name": "j", "command": ["true"], "datasets": datasets})
    assert says in str(refused.value)


@pytest.mark.parametrize("outputs, says", [
    ([{"dataset": "a"}, {"dataset": "b", "path": "b"}], "names each one's folder"),
    ([{"dataset": "a", "path": "x"}, {"dataset": "a", "path": "y"}], "a written twice"),
    ([{"dataset": "a", "path": "x"}, {"dataset": "b", "path": "x/y"}], "'x/y' lies in 'x'"),
    ([{"dataset": "a", "path": "../up"}], "not a relative path of plain names"),
])
def test_dataset_outputs_that_would_collide_or_escape_are_refused(outputs: list, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"name": "j", "command": ["true"], "outputs": outputs})
    assert says in str(refused.value)


def test_a_dataset_input_defaults_to_latest_under_data() -> None:
    item = JobSpec.model_validate({"name": "j", "command": ["true"], "datasets": [
        {"name": "my-digits"}, {"name": "b", "path": "/inputs/b/"[1:]}]}).datasets
    assert (item[0].version, item[0].directory, item[1].directory) == ("latest", "data/my-digits", "inputs/b")
    assert dataset_variable("my-digits") == "MLYARD_DATASET_MY_DIGITS"


@pytest.mark.parametrize("volumes, datasets, says", [
    ([{"name": "s", "path": "/etc/cron.d"}], [], "outside the system's directories"),
    ([{"name": "s", "path": "/usr"}], [], "outside the system's directories"),
    ([{"name": "s", "path": "/scratch/../etc"}], [], "volumes.0.path"),
    ([{"name": "s", "path": "//scratch"}], [], "volumes.0.path"),
    ([{"name": "s", "path": "/"}], [], "volumes.0.path"),
    ([{"name": "s", "path": "cache/../../up"}], [], "not a relative path of plain names"),
    ([{"name": "s"}, {"name": "s", "path": "other"}], [], "s mounted twice"),
    ([{"name": "s", "path": "/scratch"}, {"name": "t", "path": "/scratch/t"}], [], "'/scratch/t' lies in '/scratch'"),
    ([{"name": "s", "path": "data"}], [{"name": "digits"}], "'data/digits' lies in 'data'"),
])
def test_volume_mounts_that_would_collide_or_cover_the_system_are_refused(volumes: list, datasets: list,
                                                                           says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"name": "j", "command": ["true"], "volumes": volumes, "datasets": datasets})
    assert says in str(refused.value)


def test_a_volume_mounts_under_volumes_unless_it_names_a_path() -> None:
    mounted = JobSpec.model_validate({"name": "j", "command": ["true"], "volumes": [
        {"name": "scratch"}, {"name": "shared", "project": "other", "path": "/data/shared/"}]}).volumes
    assert [(item.directory, item.absolute) for item in mounted] == [("volumes/scratch", False),
                                                                     ("/data/shared", True)]
    assert volume_variable("my-cache") == "MLYARD_VOLUME_MY_CACHE"
