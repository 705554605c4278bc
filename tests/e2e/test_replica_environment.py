"""What a replica's environment holds: the variables docs/frameworks.md lists, the spec's `env`,
and nothing else of the server's process (its MLYARD_HOME, port, working directory, secrets)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPOSITORY, RunningServer

from mlyard.runtime.job_environment import KEPT

pytestmark = pytest.mark.slow
PRINT_ENVIRONMENT = ["python", "-c", "import json, os; print('ENVIRONMENT', json.dumps(sorted(os.environ)))"]


def documented_variables() -> set[str]:
    """The names in the first column of the tables of docs/frameworks.md."""
    text = (REPOSITORY / "docs" / "frameworks.md").read_text()
    first_cells = re.findall(r"^\| ([^|]*`[A-Z][A-Z0-9_]*`[^|]*)\|", text, re.MULTILINE)
    return {name for cell in first_cells for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", cell)}


def test_the_docs_table_names_every_variable_mlyard_sets() -> None:
    documented = documented_variables()
    for name in ("RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "PET_NNODES", "PET_NPROC_PER_NODE", "TF_CONFIG",
                 "MLYARD_ATTEMPT", "MLYARD_ROLE", "MLYARD_TOKEN", "CUDA_VISIBLE_DEVICES", "PATH", "HOME"):
        assert name in documented, name


def test_a_replica_sees_the_documented_variables_and_its_own_env_only(server: RunningServer) -> None:
    spec = {"name": "environment", "command": PRINT_ENVIRONMENT, "framework": "pytorch", "env": {"MY_SETTING": "1"},
            "roles": [{"name": "worker", "replicas": 2, "resources": {"cpu": 1, "memory": "256Mi"}}]}
    path = server.home / "environment-job.yaml"
    path.write_text(json.dumps(spec))
    job = server.cli_json("submit", str(path))
    assert server.cli("wait", str(job["id"]), "--timeout", "120").returncode == 0
    allowed = documented_variables() | set(KEPT) | {"MY_SETTING"}
    for replica in ("0", "1"):
        log = server.cli("logs", str(job["id"]), "--replica", replica, check=True).stdout
        names = set(json.loads(re.search(r"^ENVIRONMENT (.*)$", log, re.MULTILINE).group(1)))
        unexpected = {name for name in names - allowed if not name.startswith("LC_")}
        assert not unexpected, f"replica {replica} got variables of the server's: {sorted(unexpected)}"
        assert {"MY_SETTING", "NODE_RANK", "PET_NNODES", "MLYARD_TOKEN"} <= names
        assert not names & {"MLYARD_HOME", "MLYARD_PORT", "PWD", "MLYARD_DATABASE_URL", "MLYARD_CONFIG_DIR"}
