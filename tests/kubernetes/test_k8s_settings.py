"""The Kubernetes backend's settings from MLYARD_K8S_* variables, and the errors that name them."""

from __future__ import annotations

import pytest

from mlyard.backends.kubernetes import KubernetesSettings
from mlyard.errors import MlyardError


def test_defaults_put_the_shared_volume_at_mlyard_home():
    settings = KubernetesSettings.from_environment({"MLYARD_HOME": "/data/mlyard/"})
    assert settings.shared_mount_path == "/data/mlyard"
    assert settings.namespace == "mlyard" and settings.placement == "affinity"
    assert KubernetesSettings.from_environment({}).shared_mount_path == "/var/lib/mlyard"


def test_every_variable_is_read():
    settings = KubernetesSettings.from_environment({
        "MLYARD_K8S_NAMESPACE": "research", "MLYARD_K8S_SHARED_CLAIM": "cephfs", "MLYARD_K8S_SHARED_MOUNT": "/shared",
        "MLYARD_K8S_VOLUME_STORAGE_CLASS": "cephfs-quota",
        "MLYARD_K8S_IMAGE": "registry.example.com/train:1", "MLYARD_K8S_IMAGE_PULL_POLICY": "Always",
        "MLYARD_K8S_IMAGE_PULL_SECRETS": "one, two",
        "MLYARD_K8S_TOLERATIONS": '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
        "MLYARD_K8S_NODE_SELECTOR": "pool=gpu,nvidia.com/gpu.present=true", "MLYARD_K8S_PLACEMENT": "node-name",
        "MLYARD_K8S_SERVICE_ACCOUNT": "jobs", "MLYARD_K8S_RUN_AS_USER": "2000", "MLYARD_K8S_RUN_AS_GROUP": "3000",
        "MLYARD_K8S_CLUSTER_DOMAIN": "corp.local", "MLYARD_K8S_PORT": "23456", "MLYARD_K8S_TERMINATION_GRACE": "10m",
        "MLYARD_K8S_NODE_LOST_AFTER": "30s", "MLYARD_K8S_START_TIMEOUT": "15m", "MLYARD_K8S_FINISHED_RETENTION": "1h",
        "MLYARD_K8S_KUBECONFIG": "/etc/kube/config", "MLYARD_K8S_CONTEXT": "lab",
    })
    assert settings.namespace == "research" and settings.shared_claim == "cephfs"
    assert settings.volume_storage_class == "cephfs-quota"
    assert settings.shared_mount_path == "/shared" and settings.image == "registry.example.com/train:1"
    assert settings.image_pull_policy == "Always" and settings.image_pull_secrets == ("one", "two")
    assert settings.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert settings.node_selector == {"pool": "gpu", "nvidia.com/gpu.present": "true"}
    assert settings.placement == "node-name" and settings.service_account == "jobs"
    assert (settings.run_as_user, settings.run_as_group) == (2000, 3000)
    assert settings.cluster_domain == "corp.local" and settings.rendezvous_port == 23456
    assert settings.termination_grace_seconds == 600 and settings.node_lost_seconds == 30
    assert settings.start_timeout_seconds == 900 and settings.finished_retention_seconds == 3600
    assert (settings.kubeconfig, settings.context) == ("/etc/kube/config", "lab")


@pytest.mark.parametrize(("variables", "message"), [
    ({"MLYARD_K8S_NAMESPACE": "Research"}, "MLYARD_K8S_NAMESPACE: 'Research' is not a DNS label"),
    ({"MLYARD_K8S_PLACEMENT": "anywhere"}, "MLYARD_K8S_PLACEMENT: 'anywhere' is not affinity or node-name"),
    ({"MLYARD_K8S_RUN_AS_USER": "0"}, "MLYARD_K8S_RUN_AS_USER: '0' is not a uid above 0"),
    ({"MLYARD_K8S_RUN_AS_USER": "root"}, "MLYARD_K8S_RUN_AS_USER: 'root' is not a whole number"),
    ({"MLYARD_K8S_TOLERATIONS": "[{"}, "MLYARD_K8S_TOLERATIONS: not JSON"),
    ({"MLYARD_K8S_TOLERATIONS": '[{"keys": "x"}]'}, r"MLYARD_K8S_TOLERATIONS\[0\]"),
    ({"MLYARD_K8S_NODE_SELECTOR": "gpu"}, "MLYARD_K8S_NODE_SELECTOR: 'gpu' is not key=value"),
    ({"MLYARD_K8S_SHARED_MOUNT": "relative/path"}, "MLYARD_K8S_SHARED_MOUNT: 'relative/path' is not an absolute path"),
    ({"MLYARD_K8S_START_TIMEOUT": "soon"}, "MLYARD_K8S_START_TIMEOUT"),
    ({"MLYARD_K8S_IMAGE_PULL_POLICY": "Sometimes"}, "MLYARD_K8S_IMAGE_PULL_POLICY: 'Sometimes' is not one of"),
])
def test_bad_values_name_the_variable_and_the_value(variables, message):
    with pytest.raises(MlyardError, match=message):
        KubernetesSettings.from_environment(variables)
