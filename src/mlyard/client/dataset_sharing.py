"""Datasets through the API, continued: sharing with other projects, access requests, claims
and transfers of ownership, and registering data on the server's disks. Mixed into
`client.datasets.Datasets`, whose `_json` these calls use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlyard.api.datasets import AccessRequestInfo, ClaimInfo, DatasetInfo, GrantInfo


def _path(project: str, name: str) -> str:
    return f"/datasets/{project}/{name}"


def _answer(message: str) -> dict[str, str]:
    return {"message": message}


class DatasetSharing:
    def _json(self, method: str, path: str, **kwargs: Any) -> Any:  # pragma: no cover - Datasets has it
        raise NotImplementedError

    def grants(self, project: str, name: str) -> list[GrantInfo]:
        from mlyard.api.datasets import GrantInfo
        return [GrantInfo.model_validate(item) for item in self._json("GET", _path(project, name) + "/grants")]

    def share(self, project: str, name: str, grantee: str) -> GrantInfo:
        from mlyard.api.datasets import GrantInfo
        return GrantInfo.model_validate(self._json("PUT", f"{_path(project, name)}/grants/{grantee}"))

    def unshare(self, project: str, name: str, grantee: str) -> None:
        self._client._request("DELETE", f"{_path(project, name)}/grants/{grantee}")

    def request_access(self, project: str, name: str, *, for_project: str | None = None,
                       message: str = "") -> AccessRequestInfo:
        from mlyard.api.datasets import AccessRequestInfo
        body = {"message": message, **({"project": for_project} if for_project else {})}
        return AccessRequestInfo.model_validate(self._json("POST", _path(project, name) + "/requests", json=body))

    def requests(self, project: str | None = None, name: str | None = None, *, mine: bool = False,
                 status: str | None = None) -> list[AccessRequestInfo]:
        """A dataset's requests (with `project` and `name`), else every one the caller may answer,
        or with `mine` those they made."""
        from mlyard.api.datasets import AccessRequestInfo
        params = {**({"status": status} if status else {}), **({"mine": "true"} if mine else {})}
        path = _path(project, name) + "/requests" if name is not None else "/datasets/requests"
        return [AccessRequestInfo.model_validate(item) for item in self._json("GET", path, params=params)]

    def answer_request(self, project: str, name: str, request_id: int, *, grant: bool,
                       message: str = "") -> AccessRequestInfo:
        from mlyard.api.datasets import AccessRequestInfo
        verb = "grant" if grant else "refuse"
        return AccessRequestInfo.model_validate(self._json(
            "POST", f"{_path(project, name)}/requests/{request_id}/{verb}", json=_answer(message)))

    def register(self, path: str, name: str, *, project: str = "default", description: str = "",
                 visibility: str = "catalog") -> DatasetInfo:
        from mlyard.api.datasets import DatasetInfo
        body = {"path": path, "name": name, "project": project, "description": description, "visibility": visibility}
        return DatasetInfo.model_validate(self._json("POST", "/datasets:register", json=body))

    def claim(self, project: str, name: str, for_project: str, message: str = "") -> ClaimInfo:
        from mlyard.api.datasets import ClaimInfo
        return ClaimInfo.model_validate(self._json("POST", _path(project, name) + "/claims",
                                                   json={"project": for_project, "message": message}))

    def transfer(self, project: str, name: str, to_project: str, *, to_user: str | None = None,
                 message: str = "") -> ClaimInfo:
        from mlyard.api.datasets import ClaimInfo
        body = {"to_project": to_project, "message": message, **({"to_user": to_user} if to_user else {})}
        return ClaimInfo.model_validate(self._json("POST", _path(project, name) + "/transfers", json=body))

    def claims(self, *, mine: bool = False, status: str | None = None) -> list[ClaimInfo]:
        from mlyard.api.datasets import ClaimInfo
        params = {**({"status": status} if status else {}), **({"mine": "true"} if mine else {})}
        return [ClaimInfo.model_validate(item) for item in self._json("GET", "/datasets/claims", params=params)]

    def decide_claim(self, claim_id: int, *, approve: bool, message: str = "") -> ClaimInfo:
        from mlyard.api.datasets import ClaimInfo
        verb = "approve" if approve else "refuse"
        return ClaimInfo.model_validate(self._json("POST", f"/datasets/claims/{claim_id}/{verb}",
                                                   json=_answer(message)))
