"""`mlyard` starts without what its commands need: `mlyard --help` imports no Rich, no httpx, no
pydantic and no model, and the help it prints lists every command from `mlyard.cli.COMMANDS`,
whose short help stays each command's own."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mlyard.cli import COMMANDS, load_command

NOT_FOR_HELP = ("rich", "httpx", "httpcore", "pydantic", "pydantic_core", "yaml", "mlyard.api", "mlyard.spec",
                "mlyard.client", "mlyard.server", "mlyard.storage")
"""Packages `mlyard --help` must not import: the commands' output, HTTP and models."""


PROBE = ("import sys\n"
         "from mlyard.cli import main\n"
         "try:\n"
         "    main()\n"
         "finally:\n"
         "    loaded = sorted(name for name, module in sys.modules.items() if module is not None)\n"
         "    sys.stderr.write('\\nloaded: ' + ' '.join(loaded) + '\\n')\n")
"""`mlyard` as its script runs it, naming at exit every module it loaded: -X importtime leaves out
what `importlib.import_module` loads (the commands' modules), sys.modules has all."""


def imported_modules(*arguments: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Runs `python -X importtime -m mlyard ARGUMENTS`, then the same through `PROBE`; returns the
    first run and every module either imported."""
    # Port 9 (discard) is closed here: a command that makes a request fails at once.
    environment = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "MLYARD_URL": "http://127.0.0.1:9"}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "mlyard", *arguments], capture_output=True,
                            text=True, timeout=60, env=environment)
    timed = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", result.stderr, re.MULTILINE))
    assert "mlyard.cli" in timed, result.stderr[-2000:]  # the importtime lines were read
    probe = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True, timeout=60,
                           env=environment)
    [loaded] = re.findall(r"^loaded: (.*)$", probe.stderr, re.MULTILINE)
    return result, timed | set(loaded.split())


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_help_imports_no_output_http_or_model_module_and_lists_every_command() -> None:
    result, modules = imported_modules("--help")
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = sorted(module for module in modules if any(within(module, package) for package in NOT_FOR_HELP))
    assert not loaded, f"mlyard --help imported {loaded}"
    command_modules = {entry.module for entry in COMMANDS.values()}
    assert not command_modules & modules, "a command's module was imported for the top-level help"
    listed = re.findall(r"^  (\S+)\s", result.stdout.split("Commands:")[1], re.MULTILINE)
    assert listed == list(COMMANDS)
    for group in ("server", "queues", "users", "tokens", "projects", "env"):
        assert group in listed
    assert "Submit jobs from spec files" in result.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_short_help_kept_for_the_listing_is_the_commands_own(name: str) -> None:
    command = load_command(name)
    own = " ".join((command.help or "").split("\n\n")[0].split())
    assert COMMANDS[name].help == own


def test_a_command_loads_only_its_own_module() -> None:
    result, modules = imported_modules("server", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mlyard.cli.server" in modules
    assert not {"mlyard.cli.jobs", "mlyard.cli.listing", "mlyard.cli.queues"} & modules
    assert not any(within(module, package) for module in modules
                   for package in ("httpx", "pydantic", "mlyard.api", "mlyard.spec"))


def test_listing_jobs_builds_no_model() -> None:
    """`mlyard jobs` prints the listing's JSON as it comes: pydantic, the spec and the server stay
    out (the server is unreachable here, so the run stops after its request)."""
    result, modules = imported_modules("jobs")
    assert "cannot reach the mlyard server" in result.stderr
    assert "mlyard.cli.listing" in modules and "httpx" in modules
    assert not any(within(module, package) for module in modules
                   for package in ("pydantic", "pydantic_core", "mlyard.spec", "mlyard.server", "mlyard.api.jobs"))


def test_a_mistake_on_the_command_line_names_the_command_without_a_traceback() -> None:
    result = subprocess.run([sys.executable, "-m", "mlyard", "no-such-command"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "No such command 'no-such-command'" in result.stderr
    assert "Traceback" not in result.stderr
    bad = subprocess.run([sys.executable, "-m", "mlyard", "jobs", "--status", "DONE"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--status" in bad.stderr and "Traceback" not in bad.stderr
