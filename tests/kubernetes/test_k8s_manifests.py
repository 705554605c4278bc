"""deploy/kubernetes: every manifest fits the pinned Kubernetes version's schema, the kustomize
build does too (when kubectl or kustomize is installed), the server's Role grants what the
backend calls and no more, and the settings in the ConfigMap are ones the backend accepts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from k8s_fake_api import FakeCoreApi
from k8s_support import load_documents, validate
from test_k8s_render import ddp_two_replicas

from mlyard.backends.base import ReplicaRef
from mlyard.backends.kubernetes.backend import KubernetesBackend
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.server.http.allowed_hosts import parse_hosts

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def listed_files(directory: Path) -> list[Path]:
    """The resource files a kustomization lists, following the directories it lists."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files = []
    for entry in kustomization.get("resources", ()):
        path = directory / entry
        assert path.exists(), f"{directory / 'kustomization.yaml'} lists {entry}, which does not exist"
        files.extend(listed_files(path) if path.is_dir() else [path])
    return files


def manifests() -> list[dict]:
    return [document for path in listed_files(DEPLOY) for document in load_documents(path)]


def by_kind(kind: str, name: str | None = None) -> dict:
    return next(d for d in manifests() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))


@pytest.mark.parametrize("path", listed_files(DEPLOY), ids=lambda path: str(path.relative_to(DEPLOY)))
def test_every_manifest_fits_the_kubernetes_schema(path):
    documents = load_documents(path)
    assert documents, f"{path} holds no object"
    for document in documents:
        validate(document, f"{path.relative_to(DEPLOY)}: ")


def test_the_kustomize_build_fits_the_kubernetes_schema():
    if shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(DEPLOY)]
    elif shutil.which("kustomize"):
        command = ["kustomize", "build", str(DEPLOY)]
    else:
        pytest.skip("neither kubectl nor kustomize is installed; the files themselves are validated above")
    built = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout
    documents = [d for d in yaml.safe_load_all(built) if d]
    assert len(documents) == len(manifests())
    for document in documents:
        validate(document, "kustomize build: ")
        if document["kind"] != "Namespace" and document["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert document["metadata"]["namespace"] == "mlyard"
    claim = next(d for d in documents if d["kind"] == "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == "cephfs"  # set by the kustomization's patch


class RecordingApi:
    """The stand-in API, noting which methods the backend calls."""

    def __init__(self):
        self.api = FakeCoreApi()
        self.methods: set[str] = set()

    def __getattr__(self, name):
        self.methods.add(name)
        return getattr(self.api, name)


def rights_used() -> set[tuple[str, str]]:
    recording = RecordingApi()
    _, launch = ddp_two_replicas()
    kubernetes = KubernetesBackend(KubernetesSettings(), recording, watch=False)
    kubernetes.nodes()
    kubernetes.launch(launch)
    refs = [ReplicaRef(replica_id=r.replica_id, node=r.node, directory=r.directory, pid=None, pid_started_at=None)
            for r in launch.replicas]
    kubernetes._list_pods()
    restarted = KubernetesBackend(KubernetesSettings(), recording, watch=False)  # its cache is empty
    restarted.observe(refs)
    kubernetes.logs(refs[0])
    kubernetes.stop(refs, force=True)
    kubernetes.collect_finished(float("inf"))
    kubernetes.create_volume("mlyard-vol-0123456789abcdef", 50 * 2**30)
    kubernetes.create_volume("mlyard-vol-0123456789abcdef", 50 * 2**30)  # already there: read back
    kubernetes.remove_volume("mlyard-vol-0123456789abcdef")
    recording.api.objects.clear()
    recording.api.refuse[("pod", "mlyard-j7-a1-worker-0")] = (500, "internal error")  # launch undoes what it made
    with pytest.raises(Exception, match="internal error"):
        KubernetesBackend(KubernetesSettings(), recording, watch=False).launch(launch)
    verbs = {"create": "create", "delete": "delete", "read": "get", "list": "list"}
    rights = {("pods", "watch")}  # the watch is a list with watch=true
    for method in recording.methods:
        match = re.fullmatch(r"(create|delete|read|list)_(?:namespaced_)?(pod_log|pod|service|secret|node|persistent_volume_claim)", method)
        assert match, f"the backend calls {method}, which the test does not map to a right"
        verb, resource = match.groups()
        rights.add(("pods/log", "get") if resource == "pod_log" else (resource.replace("_", "") + "s", verbs[verb]))
    return rights


def granted() -> set[tuple[str, str]]:
    rules = by_kind("Role", "mlyard-server")["rules"] + by_kind("ClusterRole", "mlyard-node-reader")["rules"]
    return {(resource, verb) for rule in rules for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_servers_role_grants_every_right_the_backend_uses():
    missing = rights_used() - granted()
    assert not missing, f"deploy/kubernetes/rbac.yaml lacks {sorted(missing)}"


def test_the_servers_role_grants_nothing_the_backend_does_not_use():
    exec_rights = {("pods/exec", "create"), ("pods/exec", "get")}
    node_watch = {("nodes", "get"), ("nodes", "watch")}
    extra = granted() - rights_used() - exec_rights - node_watch
    assert not extra, f"deploy/kubernetes/rbac.yaml grants {sorted(extra)}, which the backend never uses"
    assert not any(rule["verbs"] == ["*"] or rule["resources"] == ["*"]
                   for rule in by_kind("Role", "mlyard-server")["rules"])


def test_the_configmap_holds_settings_the_backend_accepts_and_the_volume_it_mounts():
    config = by_kind("ConfigMap", "mlyard-config")["data"]
    settings = KubernetesSettings.from_environment(config)
    assert config["MLYARD_BACKEND"] == "kubernetes"
    server = by_kind("Deployment", "mlyard")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in server["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in server["volumes"]}
    assert mounts["shared"] == settings.shared_mount_path == config["MLYARD_HOME"]
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == settings.shared_claim
    claim = by_kind("PersistentVolumeClaim", settings.shared_claim)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # The server and job pods share files: they run as the same user.
    assert server["securityContext"]["runAsUser"] == settings.run_as_user
    assert by_kind("ServiceAccount", settings.service_account)["automountServiceAccountToken"] is False


def test_the_server_is_probed_on_its_health_endpoint():
    container = by_kind("Deployment", "mlyard")["spec"]["template"]["spec"]["containers"][0]
    allowed = parse_hosts(by_kind("ConfigMap", "mlyard-config")["data"]["MLYARD_ALLOWED_HOSTS"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/api/v1/health"
        (host,) = [header["value"] for header in container[probe]["httpGet"]["httpHeaders"] if header["name"] == "Host"]
        assert host in allowed  # a probe with the pod's address as its Host would get 400


def test_the_allowed_hosts_name_the_ingress_and_the_service_replicas_reach():
    config = by_kind("ConfigMap", "mlyard-config")["data"]
    allowed = parse_hosts(config["MLYARD_ALLOWED_HOSTS"])
    assert urlsplit(config["MLYARD_JOB_API_URL"]).hostname in allowed
    assert {rule["host"] for rule in by_kind("Ingress", "mlyard")["spec"]["rules"]} <= set(allowed)
