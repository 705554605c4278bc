"""The objects the Kubernetes backend renders for an attempt: golden files, the pinned
Kubernetes version's OpenAPI schema, and the properties that matter, checked one by one.

The golden files are in tests/kubernetes/golden/. After an intended change, regenerate them:

    MLYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/kubernetes/test_k8s_render.py

and read the diff (`git diff tests/kubernetes/golden`) before committing it.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import PurePosixPath

import pytest
from k8s_support import (
    HERE,
    HOME,
    SNAPSHOT,
    Placement,
    SchemaError,
    attempt,
    backend,
    dump_documents,
    load_documents,
    validate,
)

from mlyard.backends.base import DatasetMount
from mlyard.backends.kubernetes import names
from mlyard.backends.kubernetes.objects import render_attempt
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.errors import MlyardError
from mlyard.spec import JobSpec

GOLDEN = HERE / "golden"
GIB = 2**30
OWNER_UID = "5d0c1e9a-0000-4000-8000-00000000c0de"


def one_replica():
    spec = JobSpec.model_validate({"name": "train", "command": ["python", "train.py", "--epochs", "3"],
                                   "roles": [{"name": "worker", "resources": {"cpu": 2, "memory": "4Gi"}}]})
    renderer = backend()
    return renderer, attempt(spec, [Placement("worker", 0, "node-a", 2, 4 * GIB)], renderer=renderer)


def ddp_two_replicas(home=HOME):
    spec = JobSpec.model_validate({"name": "digits-ddp", "framework": "pytorch", "command": ["python", "examples/digits_ddp.py"],
                                   "env": {"DATA_DIR": "/var/lib/mlyard/datasets/digits"},
                                   "roles": [{"name": "worker", "replicas": 2, "resources": {"cpu": 1, "memory": "2Gi"}}]})
    renderer = backend()
    return renderer, attempt(spec, [Placement("worker", 0, "node-a", 1, 2 * GIB),
                                    Placement("worker", 1, "node-b", 1, 2 * GIB)], renderer=renderer, job_id=7,
                             home=home)


def tensorflow_chief_worker_ps():
    spec = JobSpec.model_validate({
        "name": "tf-multiworker", "framework": "tensorflow", "command": ["python", "tf_multiworker.py"],
        "roles": [{"name": "chief", "resources": {"cpu": 2, "memory": "4Gi"}},
                  {"name": "worker", "replicas": 2, "resources": {"cpu": 2, "memory": "4Gi"}},
                  {"name": "ps", "resources": {"cpu": 1, "memory": "2Gi"}, "command": ["python", "ps.py"]}]})
    renderer = backend()
    return renderer, attempt(spec, [Placement("chief", 0, "node-a", 2, 4 * GIB),
                                    Placement("worker", 0, "node-a", 2, 4 * GIB),
                                    Placement("worker", 1, "node-b", 2, 4 * GIB),
                                    Placement("ps", 0, "node-b", 1, 2 * GIB)], renderer=renderer, job_id=9, attempt_number=2)


def gpu_job():
    settings = KubernetesSettings(
        namespace="research", shared_claim="cephfs-shared", image_pull_secrets=("registry-credentials",),
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        placement="node-name", service_account="mlyard-jobs", run_as_user=2000, run_as_group=2000,
        max_log_bytes=512 * 2**20)
    spec = JobSpec.model_validate({"name": "gpu-train", "framework": "pytorch", "command": "python train.py --amp",
                                   "roles": [{"name": "worker", "resources": {"cpu": 8, "memory": "64Gi", "gpu": 2}}]})
    renderer = backend(settings)
    return renderer, attempt(spec, [Placement("worker", 0, "gpu-node-3", 8, 64 * GIB, gpus=(2, 3))],
                             renderer=renderer, job_id=11, image="registry.example.com/team/train:2.13-cuda12")


CASES = {
    "one-replica": one_replica,
    "ddp-two-replicas": ddp_two_replicas,
    "tensorflow-chief-worker-ps": tensorflow_chief_worker_ps,
    "gpu": gpu_job,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_objects_match_golden_files(case):
    renderer, launch = CASES[case]()
    documents = render_attempt(launch, renderer.settings, owner_uid=OWNER_UID)
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("MLYARD_UPDATE_GOLDEN") == "1":
        path.write_text(dump_documents(documents))
    assert path.exists(), f"{path} is missing: run with MLYARD_UPDATE_GOLDEN=1 to write it"
    expected = load_documents(path)
    assert json.loads(json.dumps(documents)) == expected, (
        f"rendered objects differ from {path}; if intended, regenerate with MLYARD_UPDATE_GOLDEN=1")


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_objects_fit_the_kubernetes_schema(case):
    renderer, launch = CASES[case]()
    for owner_uid in (None, OWNER_UID):  # as dryrun shows them and as launch submits them
        for document in render_attempt(launch, renderer.settings, owner_uid=owner_uid):
            validate(document, f"{case}: ")


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_files_fit_the_kubernetes_schema(case):
    for document in load_documents(GOLDEN / f"{case}.yaml"):
        validate(document, f"golden/{case}.yaml: ")


def test_the_schema_check_catches_what_the_api_would_refuse():
    _, launch = one_replica()
    pod = render_attempt(launch, KubernetesSettings())[2]
    broken = json.loads(json.dumps(pod))
    broken["spec"]["containers"][0]["resources"]["limits"]["cpu"] = ["2"]
    with pytest.raises(SchemaError, match=r"spec\.containers\.0\.resources\.limits\.cpu"):
        validate(broken)
    misspelled = json.loads(json.dumps(pod))
    misspelled["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(SchemaError, match="restartPolicyy"):
        validate(misspelled)


def test_ddp_replicas_find_each_other_through_the_headless_service():
    renderer, launch = ddp_two_replicas()
    service, _secret, *pods = renderer.dryrun(launch)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    for pod in pods:
        # The pod is selected by the Service, and its hostname.subdomain is the address peers use.
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        env = {variable["name"]: variable.get("value") for variable in pod["spec"]["containers"][0]["env"]}
        master = pods[0]["spec"]
        assert env["MASTER_ADDR"] == f"{master['hostname']}.{master['subdomain']}.mlyard.svc.cluster.local"
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_PORT"] == "29500"
        # Each pod is a machine of its own: one local rank, whatever node it shares.
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "1")
        assert env["GROUP_RANK"] == env["RANK"]
    assert [pod["metadata"]["labels"][names.INDEX_LABEL] for pod in pods] == ["0", "1"]


def test_tensorflow_hosts_are_pod_dns_names_with_distinct_ports_where_needed():
    renderer, launch = tensorflow_chief_worker_ps()
    _, _, *pods = renderer.dryrun(launch)
    configs = [json.loads(next(v["value"] for v in pod["spec"]["containers"][0]["env"] if v["name"] == "TF_CONFIG"))
               for pod in pods]
    cluster = configs[0]["cluster"]
    assert set(cluster) == {"chief", "worker", "ps"}
    hosts = [address for addresses in cluster.values() for address in addresses]
    assert len(set(hosts)) == 4
    for pod, config in zip(pods, configs, strict=True):
        task = config["task"]
        own = cluster[task["type"]][task["index"]]
        assert own.startswith(f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.")
    # Rank 0 listens on MASTER_PORT and its TensorFlow port: they differ.
    chief_env = {v["name"]: v.get("value") for v in pods[0]["spec"]["containers"][0]["env"]}
    assert cluster["chief"][0].rsplit(":", 1)[1] != chief_env["MASTER_PORT"]
    # A role's own command wins over the job's.
    assert pods[3]["spec"]["containers"][0]["command"][-2:] == ["python", "ps.py"]


def test_gpu_job_requests_its_gpus_and_sees_them_from_zero():
    renderer, launch = gpu_job()
    pod = renderer.dryrun(launch)[2]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "8", "memory": str(64 * GIB), "nvidia.com/gpu": "2"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"  # the node's GPUs 2 and 3, as the device plugin numbers them
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert container["image"] == "registry.example.com/team/train:2.13-cuda12"
    assert pod["spec"]["nodeName"] == "gpu-node-3" and "affinity" not in pod["spec"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    assert pod["spec"]["serviceAccountName"] == "mlyard-jobs"


def test_a_replica_below_one_core_requests_and_is_limited_to_its_share():
    renderer, launch = one_replica()
    quarter = replace(launch.replicas[0], cpu_ids=(0,), cpu_millicores=250)
    launch = replace(launch, replicas=(quarter,))
    pod = renderer.dryrun(launch)[2]
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "250m"
    validate(pod)


def test_cpu_job_sees_no_gpu_and_is_placed_by_node_affinity():
    renderer, launch = one_replica()
    pod = renderer.dryrun(launch)[2]
    env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
    assert "nodeName" not in pod["spec"]


def test_pods_run_restricted_and_keep_the_token_out_of_the_pod_spec():
    renderer, launch = ddp_two_replicas()
    _service, secret, *pods = renderer.dryrun(launch)
    for pod in pods:
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 1000
        assert spec["automountServiceAccountToken"] is False
        assert spec["restartPolicy"] == "Never"
        container = spec["containers"][0]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert "test-token-not-secret" not in json.dumps(pod)
        token = next(v for v in container["env"] if v["name"] == "MLYARD_TOKEN")
        reference = token["valueFrom"]["secretKeyRef"]
        assert reference["name"] == secret["metadata"]["name"]
        assert secret["stringData"][reference["key"]] == "test-token-not-secret"


def test_pods_run_the_launcher_on_the_shared_volume():
    renderer, launch = one_replica()
    pod = renderer.dryrun(launch)[2]
    container = pod["spec"]["containers"][0]
    directory = str(HOME / "runs" / "42" / "1" / "worker-0")
    assert container["command"] == ["python", "-m", "mlyard.backends.kubernetes.entrypoint", directory,
                                    "--snapshot", str(SNAPSHOT), "--", "python", "train.py", "--epochs", "3"]
    shared = [mount for mount in container["volumeMounts"] if mount["name"] == "shared"]
    assert {mount["mountPath"]: (mount["subPath"], mount.get("readOnly", False)) for mount in shared} == {
        directory: ("runs/42/1/worker-0", False),
        str(HOME / "checkpoints" / "42"): ("checkpoints/42", False),
        str(HOME / "tensorboard" / "42"): ("tensorboard/42", False),
        str(SNAPSHOT): (str(SNAPSHOT.relative_to(HOME)), True),
    }
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == "mlyard-shared"
    assert pod["metadata"]["annotations"][names.DIRECTORY_ANNOTATION] == directory


@pytest.mark.parametrize("case", sorted(CASES))
def test_pods_never_mount_the_shared_volume_root(case):
    """admin.token, secret.key and the database stay out of every pod: the pods run as the
    server's user."""
    renderer, launch = CASES[case]()
    launch = replace(launch, replicas=tuple(
        replace(replica, env={**replica.env, "VIRTUAL_ENV": str(HOME)}) for replica in launch.replicas))
    for pod in render_attempt(launch, renderer.settings)[2:]:
        for mount in pod["spec"]["containers"][0]["volumeMounts"]:
            if mount["name"] != "shared":
                continue
            sub_path = PurePosixPath(mount.get("subPath", ""))
            assert sub_path.parts and ".." not in sub_path.parts, mount
            for private in ("admin.token", "secret.key", "mlyard.db"):
                assert not PurePosixPath(private).is_relative_to(sub_path), mount
            assert mount["mountPath"] == str(HOME / sub_path), mount


def test_a_built_virtualenv_is_mounted_read_only_and_nothing_else_named_virtual_env():
    renderer, launch = one_replica()
    virtualenv = HOME / "environments" / ("c" * 64)
    for value, mounted in ((str(virtualenv), True), (str(HOME / "environments"), False),
                           (str(HOME / "runs"), False), ("/opt/venv", False)):
        replica = replace(launch.replicas[0], env={**launch.replicas[0].env, "VIRTUAL_ENV": value})
        pod = render_attempt(replace(launch, replicas=(replica,)), renderer.settings)[2]
        mounts = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == value]
        assert mounts == ([{"name": "shared", "mountPath": value, "subPath": f"environments/{'c' * 64}",
                            "readOnly": True}] if mounted else []), value


def test_owner_references_point_at_the_service_only_once_it_exists():
    renderer, launch = one_replica()
    dry = renderer.dryrun(launch)
    assert all("ownerReferences" not in document["metadata"] for document in dry)
    service, secret, pod = render_attempt(launch, renderer.settings, owner_uid=OWNER_UID)
    for owned in (secret, pod):
        (reference,) = owned["metadata"]["ownerReferences"]
        assert (reference["kind"], reference["name"], reference["uid"]) == ("Service", service["metadata"]["name"], OWNER_UID)


def test_a_directory_off_the_shared_volume_is_refused_with_both_paths():
    renderer, launch = one_replica()
    settings = replace(renderer.settings, shared_mount_path="/mnt/elsewhere")
    with pytest.raises(MlyardError, match=r"/var/lib/mlyard/runs/42/1/worker-0 is not on the shared volume mounted at /mnt/elsewhere"):
        render_attempt(launch, settings)


def test_long_replica_names_are_shortened_to_valid_distinct_hostnames():
    role = "r" * 63
    first, second = names.hostname(f"{role}-0"), names.hostname(f"{role}-1")
    assert first != second
    assert len(first) <= 63 and len(second) <= 63


def test_a_dataset_version_is_a_read_only_sub_path_linked_into_the_working_directory():
    renderer, launch = one_replica()
    view = HOME / "dataset-views" / "42" / "digits"
    launch = replace(launch, datasets=(DatasetMount(directory="data/digits", view=view),))
    pod = render_attempt(launch, renderer.settings)[2]
    validate(pod)
    container = pod["spec"]["containers"][0]
    assert f"--link=data/digits={view}" in container["command"][:container["command"].index("--")]
    assert {"name": "shared", "mountPath": str(view), "subPath": "dataset-views/42/digits",
            "readOnly": True} in container["volumeMounts"]
    elsewhere = replace(launch, datasets=(DatasetMount(directory="data/digits", view=PurePosixPath("/srv/x")),))
    with pytest.raises(MlyardError, match="dataset version /srv/x is not on the shared volume"):
        render_attempt(elsewhere, renderer.settings)
