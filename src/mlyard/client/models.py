"""The model registry through the API: models, their versions, aliases, and pushing and pulling
a version's files (`versioned_files.py`, shared with datasets)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlyard.client.versioned_files import Progress, PushPlan, VersionedFiles

if TYPE_CHECKING:
    from mlyard.api.models import ModelInfo, ModelVersionCreated, ModelVersionInfo


class Models(VersionedFiles):
    resource = "models"

    def create(self, project: str, name: str, **fields: Any) -> ModelInfo:
        from mlyard.api.models import ModelInfo
        return ModelInfo.model_validate(self._json("POST", "/models", json={"project": project, "name": name,
                                                                              **fields}))

    def list(self, **filters: str | None) -> list[ModelInfo]:
        from mlyard.api.models import ModelInfo
        params = {key: value for key, value in filters.items() if value}
        return [ModelInfo.model_validate(item) for item in self._json("GET", "/models", params=params)]

    def get(self, project: str, name: str) -> ModelInfo:
        from mlyard.api.models import ModelInfo
        return ModelInfo.model_validate(self._json("GET", self._path(project, name)))

    def versions(self, project: str, name: str) -> list[ModelVersionInfo]:
        from mlyard.api.models import ModelVersionInfo
        found = self._json("GET", self._path(project, name) + "/versions")
        return [ModelVersionInfo.model_validate(item) for item in found]

    def version(self, project: str, name: str, version: str) -> ModelVersionInfo:
        from mlyard.api.models import ModelVersionInfo
        return ModelVersionInfo.model_validate(self._json("GET", f"{self._path(project, name)}/versions/{version}"))

    def _create_version(self, project: str, name: str, body: dict[str, Any]) -> ModelVersionCreated:
        from mlyard.api.models import ModelVersionCreated
        body = {key: value for key, value in body.items() if value not in (None, "", {})}
        return ModelVersionCreated.model_validate(self._json("POST", self._path(project, name) + "/versions",
                                                             json=body))

    def push(self, project: str, name: str, plan: PushPlan, *, uploaded: Progress | None = None,
             **described: Any) -> ModelVersionCreated:
        """Uploads what the server lacks, then the manifest, and makes the version; `described`:
        format, framework_version, signature, metrics, parent, message."""
        return self._create_version(project, name, {"manifest": self.send(plan, uploaded), **described})

    def register(self, project: str, name: str, job: int, *, path: str | None = None,
                 **described: Any) -> ModelVersionCreated:
        """The next version from the files job `job` left in its checkpoint directory (`path`: a
        file or folder under it); the model is made if missing."""
        return self._create_version(project, name, {"job": job, "path": path, **described})
