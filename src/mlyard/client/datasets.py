"""Datasets through the API: the calls, and pushing and pulling whole directories
(`versioned_files.py`, shared with models)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlyard.client.dataset_checks import DatasetCheckCalls
from mlyard.client.dataset_sharing import DatasetSharing
from mlyard.client.versioned_files import Progress, PushPlan, VersionedFiles

if TYPE_CHECKING:
    from mlyard.api.datasets import DatasetInfo, VersionCreated, VersionDiff, VersionInfo


def _path(project: str, name: str) -> str:
    return f"/datasets/{project}/{name}"


class Datasets(VersionedFiles, DatasetSharing, DatasetCheckCalls):
    resource = "datasets"

    def create(self, project: str, name: str, **fields: Any) -> DatasetInfo:
        from mlyard.api.datasets import DatasetInfo
        return DatasetInfo.model_validate(self._json("POST", "/datasets", json={"project": project, "name": name,
                                                                                  **fields}))

    def list(self, **filters: str | None) -> list[DatasetInfo]:
        from mlyard.api.datasets import DatasetInfo
        params = {key: value for key, value in filters.items() if value}
        return [DatasetInfo.model_validate(item) for item in self._json("GET", "/datasets", params=params)]

    def get(self, project: str, name: str) -> DatasetInfo:
        from mlyard.api.datasets import DatasetInfo
        return DatasetInfo.model_validate(self._json("GET", _path(project, name)))

    def versions(self, project: str, name: str) -> list[VersionInfo]:
        from mlyard.api.datasets import VersionInfo
        return [VersionInfo.model_validate(item) for item in self._json("GET", _path(project, name) + "/versions")]

    def version(self, project: str, name: str, version: str) -> VersionInfo:
        from mlyard.api.datasets import VersionInfo
        return VersionInfo.model_validate(self._json("GET", f"{_path(project, name)}/versions/{version}"))

    def diff(self, project: str, name: str, before: str, after: str) -> VersionDiff:
        from mlyard.api.datasets import VersionDiff
        return VersionDiff.model_validate(self._json("GET", _path(project, name) + "/diff",
                                                     params={"before": before, "after": after}))

    def push(self, project: str, name: str, plan: PushPlan, *, parent: str | None = None, message: str = "",
             uploaded: Progress | None = None) -> VersionCreated:
        """Uploads what the server lacks, then the manifest, and makes the version."""
        from mlyard.api.datasets import VersionCreated
        if plan.unchanged is not None:
            return VersionCreated(version=plan.unchanged, created=False)

        digest = self.send(plan, uploaded)
        body = {"manifest": digest, "message": message, **({"parent": parent} if parent else {})}
        return VersionCreated.model_validate(self._json("POST", _path(project, name) + "/versions", json=body))
