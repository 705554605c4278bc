"""Labeling tasks through the API (`/api/v1/labeling`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlyard.api.datasets import VersionCreated
    from mlyard.api.labeling import TaskAgreement, TaskInfo
    from mlyard.client import Client


class Labeling:
    def __init__(self, client: Client):
        self._client = client

    def create(self, **fields: Any) -> TaskInfo:
        from mlyard.api.labeling import TaskInfo
        return TaskInfo.model_validate(self._client._request("POST", "/labeling/tasks", json=fields).json())

    def list(self, project: str | None = None) -> list[TaskInfo]:
        from mlyard.api.labeling import TaskInfo
        params = {"project": project} if project else {}
        return [TaskInfo.model_validate(item)
                for item in self._client._request("GET", "/labeling/tasks", params=params).json()]

    def get(self, task_id: int) -> TaskInfo:
        from mlyard.api.labeling import TaskInfo
        return TaskInfo.model_validate(self._client._request("GET", f"/labeling/tasks/{task_id}").json())

    def export(self, task_id: int, layout: str, *, message: str = "") -> VersionCreated:
        from mlyard.api.datasets import VersionCreated
        return VersionCreated.model_validate(self._client._request(
            "POST", f"/labeling/tasks/{task_id}/export", json={"format": layout, "message": message}).json())

    def agreement(self, task_id: int) -> TaskAgreement:
        from mlyard.api.labeling import TaskAgreement
        return TaskAgreement.model_validate(
            self._client._request("GET", f"/labeling/tasks/{task_id}/agreement").json())

    def label_studio(self, task_id: int) -> bytes:
        """The task's labels as Label Studio's JSON export (the file's bytes)."""
        return self._client._request("GET", f"/labeling/tasks/{task_id}/label-studio").content
