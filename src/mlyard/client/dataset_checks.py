"""Cleaning reports of dataset versions through the API, and cleaning. Mixed into
`client.datasets.Datasets`, whose `_json` these calls use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlyard.api.dataset_checks import CheckInfo, CheckReport
    from mlyard.api.datasets import VersionCreated


def _version(project: str, name: str, version: str) -> str:
    return f"/datasets/{project}/{name}/versions/{version}"


class DatasetCheckCalls:
    def _json(self, method: str, path: str, **kwargs: Any) -> Any:  # pragma: no cover - Datasets has it
        raise NotImplementedError

    def check(self, project: str, name: str, version: str, *, distance: int = 6,
              predictions: dict[str, str] | None = None) -> CheckInfo:
        """`predictions`: {dataset, project, version, path} of a CSV of predicted probabilities."""
        from mlyard.api.dataset_checks import CheckInfo
        body: dict[str, Any] = {"distance": distance, **({"predictions": predictions} if predictions else {})}
        return CheckInfo.model_validate(self._json("POST", _version(project, name, version) + "/checks", json=body))

    def checks(self, project: str, name: str, version: str) -> list[CheckInfo]:
        from mlyard.api.dataset_checks import CheckInfo
        return [CheckInfo.model_validate(item)
                for item in self._json("GET", _version(project, name, version) + "/checks")]

    def report(self, check_id: int) -> CheckReport:
        from mlyard.api.dataset_checks import CheckReport
        return CheckReport.model_validate(self._json("GET", f"/datasets/checks/{check_id}/report"))

    def clean(self, project: str, name: str, version: str, drop: list[str], *, message: str = "",
              paths: list[str] | None = None) -> VersionCreated:
        from mlyard.api.datasets import VersionCreated
        return VersionCreated.model_validate(self._json("POST", _version(project, name, version) + "/clean",
                                                        json={"drop": drop, "message": message,
                                                                              "paths": paths or []}))
