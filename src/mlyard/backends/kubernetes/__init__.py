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

__all__ = ["KubernetesSettings", "create_backend"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesSettings":
        from mlyard.backends.kubernetes.settings import KubernetesSettings

        return KubernetesSettings
    raise AttributeError(name)


def create_backend(settings: KubernetesSettings, *, max_log_bytes: int | None = None,
                   watch: bool = True) -> KubernetesBackend:
    """A backend talking to the cluster of `settings.kubeconfig` (else the in-cluster
    ServiceAccount, else ~/.kube/config), watching its pods unless `watch` is False."""
    from kubernetes import client, config

    from mlyard.backends.kubernetes.backend import KubernetesBackend

    if max_log_bytes is not None:
        settings = replace(settings, max_log_bytes=max_log_bytes)
    if settings.kubeconfig is None:
        try:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        except config.ConfigException:
            api_client = config.new_client_from_config(context=settings.context)
    else:
        api_client = config.new_client_from_config(config_file=settings.kubeconfig, context=settings.context)
    return KubernetesBackend(settings, client.CoreV1Api(api_client), watch=watch)
