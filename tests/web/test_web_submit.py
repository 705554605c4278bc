"""Submitting from the browser: the form, the YAML editor and its inline errors, cloning and
resubmitting. Every refused submission is checked to have created no job."""

from __future__ import annotations

import re

import pytest
from browsing import Visit, expect, run_job
from conftest import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

COUNTER = ("python -u -c \"import time; [print(f'step {i}') or time.sleep(0.8) for i in range(6)]; "
           "print('finished')\"")


def job_ids(server: RunningServer) -> set[int]:
    with server.client() as client:
        return {job.id for job in client.jobs(include_finished=True)}


def submitted_job(visit: Visit) -> int:
    expect(visit.page).to_have_url(re.compile(r"/jobs/\d+\?notice="))
    return int(re.search(r"/jobs/(\d+)", visit.page.url).group(1))


def test_a_job_submitted_from_the_form_runs_and_succeeds_with_its_log_live(visit: Visit,
                                                                          web_server: RunningServer) -> None:
    visit.log_in()
    visit.page.get_by_role("link", name="Submit", exact=True).click()
    expect(visit.page.locator("h1")).to_have_text("Submit a job")
    visit.page.fill("#field-name", "from-the-form")
    visit.page.fill("#field-command", COUNTER)
    visit.page.fill("#field-memory", "512Mi")
    visit.page.fill("#field-env", "GREETING=hello world")
    visit.shot("form")
    visit.page.get_by_role("button", name="Submit job").click()
    job = submitted_job(visit)
    expect(visit.page.locator(".notice")).to_contain_text(f"Job {job} submitted")
    expect(visit.page.locator("#job-summary .status").first).to_have_text("RUNNING", timeout=60_000)
    visit.shot("running")
    log = visit.page.locator("pre.log")
    expect(log).to_contain_text("step 1", timeout=30_000)
    assert "finished" not in log.inner_text()  # live, while the job still prints
    expect(visit.page.locator("#job-summary .status").first).to_have_text("SUCCEEDED", timeout=60_000)
    expect(log).to_contain_text("step 5\nfinished")
    visit.shot("succeeded")
    detail = web_server.cli_json("show", str(job))
    assert detail["spec"]["env"] == {"GREETING": "hello world"}
    assert detail["spec"]["roles"][0]["resources"]["memory"] == 512 << 20
    assert detail["owner"] == "admin"


def test_a_bad_form_field_is_marked_beside_it_and_nothing_is_submitted(visit: Visit,
                                                                        web_server: RunningServer) -> None:
    before = job_ids(web_server)
    visit.log_in()
    visit.page.goto("/submit")
    visit.page.fill("#field-name", "bad-memory")
    visit.page.fill("#field-command", "true")
    visit.page.fill("#field-memory", "lots")
    visit.page.get_by_role("button", name="Submit job").click()
    expect(visit.page.locator("#submit-message")).to_contain_text("not submitted")
    expect(visit.page.locator("#error-memory")).to_have_text("cannot read memory quantity 'lots'; write e.g. 512Mi, 2Gi or 4GB")
    expect(visit.page.locator("#field-memory")).to_have_attribute("aria-invalid", "true")
    expect(visit.page.locator("#field-name")).to_have_value("bad-memory")  # what was typed is kept
    visit.shot("memory-error")
    assert job_ids(web_server) == before


def test_bad_yaml_shows_the_field_error_as_it_is_typed_and_submits_nothing(visit: Visit,
                                                                         web_server: RunningServer) -> None:
    before = job_ids(web_server)
    visit.log_in()
    visit.page.goto("/submit?mode=yaml")
    editor = visit.page.locator("#spec-yaml")
    errors = visit.page.locator("#spec-errors")
    expect(errors).to_have_text("The spec is valid.")  # the example it starts with
    editor.fill("name: yaml-job\ncommand: [python, -c, 'print(1)']\nroles:\n  - replicas: 0\n")
    # Checked while typing: no click on Submit yet.
    expect(errors).to_contain_text("roles.0.replicas line 4: Input should be greater than or equal to 1")
    visit.shot("field-error")
    editor.fill("name: yaml-job\ncommand: [python\n")
    expect(errors).to_contain_text("not valid YAML")
    expect(errors).to_contain_text("line 3")
    visit.shot("syntax-error")
    editor.fill("name: yaml-job\ncommand: [python, -c, 'print(1)']\nroles:\n  - replicas: 0\n")
    expect(errors).to_have_attribute("data-count", "1")
    visit.page.get_by_role("button", name="Submit job").click()  # refused by the server as well
    expect(visit.page.locator("#submit-message")).to_contain_text("not submitted")
    expect(visit.page.locator("#spec-errors")).to_contain_text("roles.0.replicas")
    expect(visit.page.locator("#spec-yaml")).to_have_value(re.compile(r"replicas: 0"))
    visit.shot("refused")
    # A valid spec naming a queue that does not exist: refused by the server's own checks.
    visit.page.locator("#spec-yaml").fill("name: yaml-job\ncommand: 'true'\nqueue: no-such-queue\n")
    expect(visit.page.locator("#spec-errors")).to_have_text("The spec is valid.")
    visit.page.locator("#spec-yaml").press("Control+Enter")
    expect(visit.page.locator("#submit-message")).to_contain_text("queue 'no-such-queue' does not exist")
    visit.shot("unknown-queue")
    assert job_ids(web_server) == before


def test_a_job_is_cloned_into_the_editor_and_resubmitted_as_it_was(visit: Visit, web_server: RunningServer) -> None:
    original = run_job(web_server, "to-clone", "print('original run')", "--set", "priority=3")
    web_server.cli("wait", str(original), "--timeout", "60", check=True)
    visit.log_in()
    visit.page.goto(f"/jobs/{original}")
    visit.page.get_by_role("link", name="Clone and edit").click()
    expect(visit.page).to_have_url(re.compile(rf"/submit\?from={original}$"))
    expect(visit.page.locator(".notice")).to_contain_text(f"A copy of job {original}")
    editor = visit.page.locator("#spec-yaml")
    expect(editor).to_have_value(re.compile(r"^name: to-clone\ncommand:"))
    expect(editor).to_have_value(re.compile(r"priority: 3"))
    editor.fill(editor.input_value().replace("name: to-clone", "name: the-clone"))
    expect(visit.page.locator("#spec-errors")).to_have_text("The spec is valid.")
    visit.shot("clone")
    visit.page.get_by_role("button", name="Submit job").click()
    clone = submitted_job(visit)
    expect(visit.page.locator("h1")).to_contain_text("the-clone")
    expect(visit.page.locator("#job-summary .status").first).to_have_text("SUCCEEDED", timeout=60_000)
    expect(visit.page.locator("pre.log")).to_contain_text("original run")
    visit.shot("clone-succeeded")
    before = job_ids(web_server)
    visit.page.get_by_role("button", name="Resubmit").click()
    again = submitted_job(visit)
    expect(visit.page.locator(".notice")).to_contain_text(f"submitted again from job {clone}")
    visit.shot("resubmitted")
    assert job_ids(web_server) - before == {again}
    specs = [web_server.cli_json("show", str(job))["spec"] for job in (original, clone, again)]
    assert specs[0] | {"name": "the-clone"} == specs[1] == specs[2]
