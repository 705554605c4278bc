"""Project volumes on Kubernetes: the PersistentVolumeClaim each one is, the pods that mount
them (checked against the pinned Kubernetes version's schema), and the backend making and
deleting claims through the stand-in API, in process and through the real client."""

from __future__ import annotations

from dataclasses import replace

import pytest
from k8s_fake_api import FakeCoreApi
from k8s_support import backend, validate
from kubernetes import client
from test_k8s_render import HOME, OWNER_UID, ddp_two_replicas

from mlyard.backends.base import DatasetMount, VolumeMount
from mlyard.backends.kubernetes import names
from mlyard.backends.kubernetes.backend import KubernetesBackend, KubernetesError
from mlyard.backends.kubernetes.objects import render_attempt
from mlyard.backends.kubernetes.settings import KubernetesSettings
from mlyard.backends.kubernetes.volumes import render_claim
from mlyard.errors import MlyardError

GIB = 2**30
SCRATCH = "mlyard-vol-0123456789abcdef"
CACHE = "mlyard-vol-fedcba9876543210"


def with_volumes(*mounts: VolumeMount):
    renderer, launch = ddp_two_replicas()
    directories = {mount.claim: renderer.volume_directory(mount.claim) for mount in mounts}
    return renderer, replace(launch, volumes=mounts, volume_directories=directories)


def entrypoint_arguments(pod: dict) -> list[str]:
    command = pod["spec"]["containers"][0]["command"]
    return command[:command.index("--")]


# ----------------------------------------------------------------- the claim
def test_a_claim_asks_for_its_size_in_bytes_shared_by_every_node_of_the_default_class():
    claim = render_claim(SCRATCH, 50 * GIB, KubernetesSettings())
    validate(claim)
    assert claim["metadata"]["name"] == SCRATCH and claim["metadata"]["namespace"] == "mlyard"
    assert claim["metadata"]["labels"] == {names.MANAGED_BY: names.MANAGER, "mlyard/volume": SCRATCH}
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "53687091200"}}}


def test_a_claim_names_the_configured_storage_class():
    settings = KubernetesSettings.from_environment({"MLYARD_K8S_NAMESPACE": "research",
                                                    "MLYARD_K8S_VOLUME_STORAGE_CLASS": "cephfs"})
    claim = render_claim(SCRATCH, 50 * GIB, settings)
    validate(claim)
    assert claim["spec"]["storageClassName"] == "cephfs"
    assert claim["metadata"]["namespace"] == "research"


def test_a_storage_class_that_is_no_name_is_refused_by_its_variable():
    with pytest.raises(MlyardError, match="MLYARD_K8S_VOLUME_STORAGE_CLASS: 'CephFS' is not a StorageClass name"):
        KubernetesSettings.from_environment({"MLYARD_K8S_VOLUME_STORAGE_CLASS": "CephFS"})


# ----------------------------------------------------------------- the pods
def test_pods_mount_each_volume_read_write_at_its_path_and_link_relative_paths():
    renderer, launch = with_volumes(VolumeMount("scratch", SCRATCH, "/scratch"),
                                    VolumeMount("cache", CACHE, "volumes/cache"))
    for owner_uid in (None, OWNER_UID):
        for document in render_attempt(launch, renderer.settings, owner_uid=owner_uid):
            validate(document, "volumes: ")
    cache = renderer.volume_directory(CACHE)
    assert cache == f"/var/lib/mlyard-volumes/{CACHE}"
    _service, _secret, *pods = renderer.dryrun(launch)
    assert len(pods) == 2
    for pod in pods:
        volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
        assert len(volumes) == len(pod["spec"]["volumes"])  # names unique
        assert volumes[SCRATCH]["persistentVolumeClaim"] == {"claimName": SCRATCH}
        assert volumes[CACHE]["persistentVolumeClaim"] == {"claimName": CACHE}
        mounts = [mount for mount in pod["spec"]["containers"][0]["volumeMounts"] if mount["name"] in (SCRATCH, CACHE)]
        assert [(mount["name"], mount["mountPath"]) for mount in mounts] == [(SCRATCH, "/scratch"), (CACHE, cache)]
        assert not any(mount.get("readOnly") or mount.get("subPath") for mount in mounts)
        arguments = entrypoint_arguments(pod)
        assert f"--link=volumes/cache={cache}" in arguments
        assert not any(argument.startswith("--link=/scratch") for argument in arguments)


def test_a_volume_mounted_at_several_paths_is_one_pod_volume():
    renderer, launch = with_volumes(VolumeMount("scratch", SCRATCH, "/scratch"),
                                    VolumeMount("scratch", SCRATCH, "volumes/scratch"),
                                    VolumeMount("scratch", SCRATCH, "more/scratch"))
    pod = renderer.dryrun(launch)[2]
    validate(pod)
    directory = renderer.volume_directory(SCRATCH)
    assert [volume["name"] for volume in pod["spec"]["volumes"]].count(SCRATCH) == 1
    assert [mount["mountPath"] for mount in pod["spec"]["containers"][0]["volumeMounts"]
            if mount["name"] == SCRATCH] == ["/scratch", directory]
    assert {f"--link=volumes/scratch={directory}", f"--link=more/scratch={directory}"} <= set(entrypoint_arguments(pod))


def test_dataset_and_volume_links_both_reach_the_entrypoint():
    renderer, launch = with_volumes(VolumeMount("cache", CACHE, "volumes/cache"))
    launch = replace(launch, datasets=(DatasetMount("data/digits", HOME / "dataset-views" / "7" / "digits"),))
    arguments = entrypoint_arguments(renderer.dryrun(launch)[2])
    assert [argument for argument in arguments if argument.startswith("--link=")] == [
        f"--link=data/digits={HOME / 'dataset-views' / '7' / 'digits'}",
        f"--link=volumes/cache={renderer.volume_directory(CACHE)}"]


def test_pods_without_volumes_mount_no_claim_but_the_shared_one():
    renderer, launch = ddp_two_replicas()
    for pod in renderer.dryrun(launch)[2:]:
        claims = [volume for volume in pod["spec"]["volumes"] if "persistentVolumeClaim" in volume]
        assert [volume["name"] for volume in claims] == ["shared"]


# ----------------------------------------------------------------- the backend
@pytest.fixture
def api():
    return FakeCoreApi()


def test_create_volume_creates_the_claim_and_says_what_holds_it_to_its_size(api):
    api.default_storage_class = "cephfs"  # what the DefaultStorageClass admission writes in
    kubernetes = KubernetesBackend(KubernetesSettings(), api, watch=False)
    words = kubernetes.create_volume(SCRATCH, 50 * GIB)
    assert api.calls == [("create", f"persistentvolumeclaim/{SCRATCH}")]
    stored = api.objects[("persistentvolumeclaim", SCRATCH)]
    rendered = render_claim(SCRATCH, 50 * GIB, KubernetesSettings())
    assert stored["spec"] == {**rendered["spec"], "storageClassName": "cephfs"}
    assert stored["metadata"]["labels"] == rendered["metadata"]["labels"]
    assert words == ("its PersistentVolumeClaim's request of 50.0 GiB, which storage class cephfs enforces if its "
                     "provisioner does (CephFS's sets ceph.quota.max_bytes; NFS provisioners set no limit)")
    assert kubernetes.volume_usage(SCRATCH) is None


def test_create_volume_again_describes_the_claim_already_there(api):
    kubernetes = KubernetesBackend(KubernetesSettings(), api, watch=False)
    assert "the cluster's default storage class" in kubernetes.create_volume(SCRATCH, 50 * GIB)
    # The API keeps quantities in their canonical form.
    api.objects[("persistentvolumeclaim", SCRATCH)]["spec"].update(
        resources={"requests": {"storage": "60Gi"}}, storageClassName="nfs-client")
    words = kubernetes.create_volume(SCRATCH, 50 * GIB)
    assert "request of 60.0 GiB, which storage class nfs-client enforces if its provisioner does" in words
    assert len([key for key in api.objects if key[0] == "persistentvolumeclaim"]) == 1


def test_remove_volume_deletes_the_claim_and_a_missing_one_is_no_error(api):
    kubernetes = KubernetesBackend(KubernetesSettings(), api, watch=False)
    kubernetes.create_volume(SCRATCH, GIB)
    kubernetes.remove_volume(SCRATCH)
    kubernetes.remove_volume(SCRATCH)
    assert ("persistentvolumeclaim", SCRATCH) not in api.objects
    assert api.calls[1:] == [("delete", f"persistentvolumeclaim/{SCRATCH}")] * 2


def test_a_refused_claim_says_which_and_why(api):
    api.refuse[("persistentvolumeclaim", SCRATCH)] = (403, "exceeded quota: requests.storage")
    kubernetes = KubernetesBackend(KubernetesSettings(), api, watch=False)
    with pytest.raises(KubernetesError, match=rf"could not create PersistentVolumeClaim mlyard/{SCRATCH}: "
                                              r"Kubernetes answered 403: exceeded quota"):
        kubernetes.create_volume(SCRATCH, GIB)


def test_claims_through_the_real_client(api):
    api.serve()
    try:
        kubernetes = KubernetesBackend(KubernetesSettings(volume_storage_class="cephfs"),
                                       client.CoreV1Api(client.ApiClient(client.Configuration(host=api.url))),
                                       watch=False)
        assert "storage class cephfs" in kubernetes.create_volume(SCRATCH, 50 * GIB)
        assert "storage class cephfs" in kubernetes.create_volume(SCRATCH, 50 * GIB)
        kubernetes.remove_volume(SCRATCH)
        kubernetes.remove_volume(SCRATCH)
        path = "/api/v1/namespaces/mlyard/persistentvolumeclaims"
        assert [(method, url.split("?")[0]) for method, url in api.requests] == [
            ("POST", path), ("POST", path), ("GET", f"{path}/{SCRATCH}"),
            ("DELETE", f"{path}/{SCRATCH}"), ("DELETE", f"{path}/{SCRATCH}")]
        assert api.deleted == [("persistentvolumeclaim", SCRATCH, None)]
    finally:
        api.close()


def test_a_backend_without_an_api_still_names_the_volume_directory():
    assert backend().volume_directory(SCRATCH) == f"/var/lib/mlyard-volumes/{SCRATCH}"
