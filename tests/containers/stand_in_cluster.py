"""A one-node stand-in for a Kubernetes cluster, where none can run: the part of the API that
mlyard's backend uses (`k8s_fake_api.FakeCoreApi`, served over HTTP to the official client)
with a kubelet that runs each created pod as a container on the engine, the way a kubelet
starts it (`container_arguments`), and reports what becomes of it in the API's shapes
(tests/kubernetes/pods holds recorded ones): Pending, Running, then Succeeded or Failed with the
exit code and reason (OOMKilled included); a deletion marks the pod, stops its container
with the grace period asked for, then removes it; deleting a Service deletes what it owns.

What it leaves out: scheduling (every pod runs here, whatever its affinity), Services and the
cluster's DNS (pods share this machine's network and their peers' names resolve to
127.0.0.1, so the backend needs a free MLYARD_K8S_PORT), image pulls, probes and restarts.
"""

from __future__ import annotations

import base64
import copy
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import docker.errors
from k8s_fake_api import FakeCoreApi

from mlyard.backends.local.containers import Engine
from mlyard.backends.kubernetes.entrypoint import peers

NODE = "stand-in-node"
LABEL = "mlyard.test.stand-in-pod"


def _nano_cpus(quantity: str) -> int:
    """A Kubernetes CPU quantity ("2", "250m") in billionths of a CPU."""
    if quantity.endswith("m"):
        return int(quantity[:-1]) * 1_000_000
    return int(float(quantity) * 1e9)


def container_arguments(pod: dict[str, Any], secrets: dict[str, dict[str, str]], shared: Path) -> dict[str, Any]:
    """`containers.create` arguments for the pod's one container: its command, environment (the
    Secret's values put in), user and group, capabilities, privilege escalation, limits, the
    shared claim's subPaths bound from `shared` and a memory-backed emptyDir as tmpfs."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    environment = {}
    for variable in container.get("env", ()):
        if "valueFrom" in variable:
            reference = variable["valueFrom"]["secretKeyRef"]
            environment[variable["name"]] = secrets[reference["name"]][reference["key"]]
        else:
            environment[variable["name"]] = variable["value"]
    volumes = {volume["name"]: volume for volume in spec.get("volumes", ())}
    binds, tmpfs = {}, {}
    for mount in container.get("volumeMounts", ()):
        volume = volumes[mount["name"]]
        if "persistentVolumeClaim" in volume:
            source = shared / mount.get("subPath", "")
            if not source.exists():
                source.mkdir(parents=True)  # as a kubelet makes a missing subPath: root's
            binds[str(source)] = {"bind": mount["mountPath"], "mode": "ro" if mount.get("readOnly") else "rw"}
        elif volume.get("emptyDir", {}).get("medium") == "Memory":
            tmpfs[mount["mountPath"]] = f"size={volume['emptyDir']['sizeLimit']}"
        else:
            raise ValueError(f"the stand-in kubelet has no volume like {volume}")
    pod_security, security = spec.get("securityContext", {}), container.get("securityContext", {})
    user = pod_security.get("runAsUser")
    if pod_security.get("runAsNonRoot") and not user:
        raise ValueError("runAsNonRoot without runAsUser: a kubelet checks the image's user, this one refuses")
    limits = container.get("resources", {}).get("limits", {})
    api_host = urlparse(environment.get("MLYARD_API", "")).hostname
    return {
        "image": container["image"], "entrypoint": container["command"], "command": container.get("args", []),
        "environment": environment, "user": f"{user}:{pod_security.get('runAsGroup', user)}" if user else None,
        "cap_drop": security.get("capabilities", {}).get("drop"),
        "security_opt": [] if security.get("allowPrivilegeEscalation", True) else ["no-new-privileges"],
        "privileged": bool(security.get("privileged")),
        "mem_limit": int(limits["memory"]) if "memory" in limits else None,
        "nano_cpus": _nano_cpus(limits["cpu"]) if "cpu" in limits else None,
        "volumes": binds, "tmpfs": tmpfs, "network_mode": "host",
        # The cluster's DNS, as far as a pod needs it: its peers' names, and the API's.
        "extra_hosts": {host: "127.0.0.1" for host in [*peers(environment), api_host] if host},
        "labels": {LABEL: pod["metadata"]["name"]},
    }


def secret_values(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's values as a pod's environment gets them: `data` decoded, `stringData` as written."""
    values = {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
    return {**values, **(secret.get("stringData") or {})}


def node_object(cpus: int, memory_bytes: int) -> dict[str, Any]:
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": NODE, "uid": "00000000-0000-4000-8000-000000000001", "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": str(cpus), "memory": str(memory_bytes), "pods": "110"},
            "allocatable": {"cpu": str(cpus), "memory": str(memory_bytes), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE}],
        },
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _engine_time(text: str | None) -> str:
    """The engine's nanosecond RFC 3339 time in the API's whole seconds."""
    return (text or _now())[:19] + "Z"


class StandInCluster:
    def __init__(self, engine: Engine, shared: Path, *, cpus: int = 4, memory_bytes: int = 8 * 2**30):
        self.engine = engine
        self.shared = shared
        self.api = FakeCoreApi(kubelet=self)
        self.api.nodes = [node_object(cpus, memory_bytes)]
        self.url = self.api.serve()
        self._containers: dict[str, Any] = {}
        self._deleting: set[str] = set()

    def write_kubeconfig(self, path: Path, namespace: str = "mlyard") -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: stand-in\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: stand-in\n  user:\n    token: stand-in\n"
            f"contexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: stand-in\n"
            f"    namespace: {namespace}\ncurrent-context: stand-in\n")
        return path

    def pods(self) -> list[dict[str, Any]]:
        with self.api.lock:
            return [copy.deepcopy(o) for (kind, _), o in self.api.objects.items() if kind == "pod"]

    def containers(self) -> list[Any]:
        """The engine's containers of this cluster's pods, running or not."""
        return self.engine.client.containers.list(all=True, filters={"label": LABEL})

    def close(self) -> None:
        for container in self.containers():
            container.remove(force=True)
        self.api.close()

    # ------------------------------------------------------------- called by the API
    def created(self, pod: dict[str, Any]) -> None:
        threading.Thread(target=self._run, args=(pod["metadata"]["name"],), daemon=True).start()

    def deleting(self, name: str, grace: int | None) -> dict[str, Any]:
        with self.api.lock:
            found = self.api.objects.get(("pod", name))
            if found is None:  # deleted meanwhile by another request
                return {"kind": "Status", "apiVersion": "v1", "status": "Success"}
            if grace is None:
                grace = found["spec"].get("terminationGracePeriodSeconds", 30)
            found["metadata"].setdefault("deletionTimestamp", _now())
            found["metadata"]["deletionGracePeriodSeconds"] = grace
            self._deleting.add(name)
        self.api.publish("MODIFIED", found)
        threading.Thread(target=self._terminate, args=(name, grace), daemon=True).start()
        return found

    def log(self, name: str, tail_lines: int | None) -> bytes:
        container = self._containers.get(name)
        if container is None:
            return b""
        return container.logs(tail=tail_lines if tail_lines is not None else "all")

    # ------------------------------------------------------------- the kubelet
    def _run(self, name: str) -> None:
        with self.api.lock:
            pod = copy.deepcopy(self.api.objects.get(("pod", name)))
            secrets = {secret: secret_values(o) for (kind, secret), o in self.api.objects.items()
                       if kind == "secret"}
        if pod is None or name in self._deleting:
            return
        try:
            container = self.engine.client.containers.create(**container_arguments(pod, secrets, self.shared))
            self._containers[name] = container
            container.start()
            if name in self._deleting:  # deleted while its container was being made
                container.stop(timeout=0)
        except (docker.errors.APIError, ValueError, KeyError) as error:
            self._set_status(name, "Pending", {"waiting": {"reason": "CreateContainerError", "message": str(error)}})
            return
        container.reload()
        started = _engine_time(container.attrs["State"].get("StartedAt"))
        self._set_status(name, "Running", {"running": {"startedAt": started}}, ready=True)
        container.wait()
        container.reload()
        state = container.attrs["State"]
        code = int(state.get("ExitCode", -1))
        reason = "OOMKilled" if state.get("OOMKilled") else ("Completed" if code == 0 else "Error")
        self._set_status(name, "Succeeded" if code == 0 else "Failed", {"terminated": {
            "exitCode": code, "reason": reason, "startedAt": started,
            "finishedAt": _engine_time(state.get("FinishedAt"))}})

    def _terminate(self, name: str, grace: int) -> None:
        container = self._containers.get(name)
        if container is not None:
            try:
                container.stop(timeout=grace)
                container.wait()
            except docker.errors.NotFound:
                pass
        with self.api.lock:
            gone = self.api.objects.pop(("pod", name), None)
        if gone is not None:
            self.api.publish("DELETED", gone)

    def _set_status(self, name: str, phase: str, state: dict[str, Any], *, ready: bool = False) -> None:
        with self.api.lock:
            pod = self.api.objects.get(("pod", name))
            if pod is None:
                return
            (container,) = pod["spec"]["containers"]
            pod["status"] = {
                "phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": _now(),
                "qosClass": "Guaranteed",
                "containerStatuses": [{"name": container["name"], "image": container["image"], "ready": ready,
                                       "restartCount": 0, "started": "running" in state, "state": state}]}
        self.api.publish("MODIFIED", pod)
