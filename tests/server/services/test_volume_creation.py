"""Creating a volume through the real service and database (SQLite and PostgreSQL), against the
local backend's storage: a volume whose storage cannot be made leaves no row behind, and one
that can is stored with how its quota is held."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlyard.api.volumes import VolumeRequest
from mlyard.backends.local.volumes import DirectoryVolumes
from mlyard.server import auth
from mlyard.server.services import volumes
from mlyard.server.store.db import Database

ADMIN = auth.Principal(name="admin", user_id=None, is_admin=True)


class Storage(DirectoryVolumes):
    """The local backend's volume storage under `root`."""

    def __init__(self, root: Path):
        self.volumes_root = root


def test_storage_that_cannot_be_made_leaves_no_volume(database_url: str, tmp_path: Path) -> None:
    database = Database.open(database_url)
    try:
        (tmp_path / "a-file").write_text("not a folder")
        with pytest.raises(NotADirectoryError):
            volumes.create_volume(database, ADMIN, VolumeRequest(name="scratch", size="1Mi"),
                                  Storage(tmp_path / "a-file" / "volumes"))
        assert volumes.list_volumes(database, ADMIN) == []

        made = volumes.create_volume(database, ADMIN, VolumeRequest(name="scratch", size="1Mi"),
                                     Storage(tmp_path / "volumes"))
        assert (made.name, made.size_bytes, made.enforcement) == ("scratch", 1024**2, None)
        assert [volume.name for volume in volumes.list_volumes(database, ADMIN)] == ["scratch"]
        assert len(list((tmp_path / "volumes").iterdir())) == 1
    finally:
        database.close()
