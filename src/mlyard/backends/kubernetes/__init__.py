"""The Kubernetes backend: every replica a pod, each attempt behind a headless Service.

Light on purpose: job pods run `mlyard.backends.kubernetes.entrypoint`, which must not need
the `kubernetes` client; the backend itself is imported by `create_backend`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlyard.backends.kubernetes.backend import KubernetesBackend
    from mlyard.backends.kubernetes.settings import KubernetesSettings

__all__ = ["KubernetesSettings", "api_client", "create_backend"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesSettings":
        from mlyard.backends.kubernetes.settings import KubernetesSettings

        return KubernetesSettings
    raise AttributeError(name)


def create_backend(settings: KubernetesSettings, *, max_log_bytes: int | None = None,
                   watch: bool = True) -> KubernetesBackend:
    """A backend talking to the cluster of `settings.kubeconfig` (else the in-cluster
    ServiceAccount, else ~/.kube/config), watching its pods unless `watch` is False."""
    from kubernetes import client

    from mlyard.backends.kubernetes.backend import KubernetesBackend

    if max_log_bytes is not None:
        settings = replace(settings, max_log_bytes=max_log_bytes)
    return KubernetesBackend(settings, client.CoreV1Api(api_client(settings)), watch=watch)


def api_client(settings: KubernetesSettings) -> Any:
    """The API client of the configured cluster. Raises KubernetesError naming what was
    looked for when there is none (a server started outside a pod without a kubeconfig)."""
    from kubernetes import client, config

    from mlyard.backends.kubernetes.backend import KubernetesError

    where = (f"the kubeconfig MLYARD_K8S_KUBECONFIG={settings.kubeconfig}" if settings.kubeconfig else
             "a kubeconfig (KUBECONFIG, else ~/.kube/config)")
    if settings.context:
        where += f" with the context {settings.context!r}"
    try:
        if settings.kubeconfig is None:
            try:
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                return client.ApiClient(configuration)
            except config.ConfigException:
                pass  # not in a pod: a kubeconfig, as kubectl would
        return config.new_client_from_config(config_file=settings.kubeconfig, context=settings.context)
    except (config.ConfigException, OSError) as error:
        inside = "" if settings.kubeconfig else "the server does not run in a pod, and "
        raise KubernetesError(f"MLYARD_BACKEND=kubernetes but no cluster to use: {inside}{where} "
                              f"could not be loaded ({error})") from None
