"""Volumes through the API (`/api/v1/volumes`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlyard.api.volumes import VolumeInfo
    from mlyard.client import Client


class Volumes:
    def __init__(self, client: Client):
        self._client = client

    def create(self, project: str, name: str, size: int | str, *, description: str = "") -> VolumeInfo:
        from mlyard.api.volumes import VolumeInfo
        body = {"project": project, "name": name, "size": size, "description": description}
        return VolumeInfo.model_validate(self._client._request("POST", "/volumes", json=body).json())

    def list(self, project: str | None = None) -> list[VolumeInfo]:
        from mlyard.api.volumes import VolumeInfo
        params = {"project": project} if project else {}
        return [VolumeInfo.model_validate(item)
                for item in self._client._request("GET", "/volumes", params=params).json()]

    def get(self, project: str, name: str) -> VolumeInfo:
        from mlyard.api.volumes import VolumeInfo
        return VolumeInfo.model_validate(self._client._request("GET", f"/volumes/{project}/{name}").json())

    def remove(self, project: str, name: str) -> None:
        self._client._request("DELETE", f"/volumes/{project}/{name}")
