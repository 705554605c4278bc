"""The trees of the dataset versions a job reads (`control/dataset_views.py`) and their links in a
replica's working directory (`runtime/dataset_links.py`): hard links into the store, closed to
writes, never half made; a link never replaces the code's own files nor lands outside."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mlyard.errors import MlyardError
from mlyard.runtime.dataset_links import make_links
from mlyard.server.control.dataset_views import build
from mlyard.storage import BlobStore
from mlyard.storage.trees import remove_read_only_tree


def stored(store: BlobStore, content: bytes) -> str:
    return store.put_stream([content])[0]


def test_a_tree_links_the_stores_files_read_only(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    same = stored(store, b"same bytes")
    files = [("README.md", stored(store, b"# digits")), ("train/0/1.png", same), ("train/0/2.png", same)]
    view = tmp_path / "views" / "7" / "digits"
    build(view, files, store)
    assert {path.relative_to(view).as_posix() for path in view.rglob("*") if path.is_file()} == {
        "README.md", "train/0/1.png", "train/0/2.png"}
    blob = store.path_for(same)
    assert os.path.samefile(view / "train" / "0" / "1.png", blob), "a hard link, not a copy"
    assert blob.stat().st_nlink == 3
    for directory in (view, view / "train", view / "train" / "0"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o555
    assert stat.S_IMODE(blob.stat().st_mode) == 0o444
    assert [entry.name for entry in view.parent.iterdir()] == ["digits"], "no partial tree beside it"
    remove_read_only_tree(view)
    assert not view.exists() and blob.read_bytes() == b"same bytes", "removing a tree keeps the store"


def test_a_tree_whose_blob_is_gone_is_not_left_half_made(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    files = [("a.txt", stored(store, b"a")), ("b.txt", "f" * 64)]
    view = tmp_path / "views" / "7" / "digits"
    with pytest.raises(MlyardError, match="lost the blob of 'b.txt'"):
        build(view, files, store)
    assert list(view.parent.iterdir()) == []
    with pytest.raises(MlyardError, match="leads out"):
        build(view, [("../escape", files[0][1])], store)


def test_links_go_into_the_working_directory_and_never_replace_the_code(tmp_path: Path) -> None:
    workdir = tmp_path / "code"
    (workdir / "data").mkdir(parents=True)
    (workdir / "data" / "mine").write_text("the code's own")
    target = tmp_path / "views" / "digits"
    target.mkdir(parents=True)
    make_links(workdir, {"data/digits": str(target)})
    assert os.readlink(workdir / "data" / "digits") == str(target)
    with pytest.raises(FileExistsError, match="already has 'data/mine'"):
        make_links(workdir, {"data/mine": str(target)})
    (workdir / "out").symlink_to(tmp_path, target_is_directory=True)
    for through in ("out/digits", "out/deeper/digits"):
        with pytest.raises(ValueError, match="leads out of the job's working directory through the link out"):
            make_links(workdir, {through: str(target)})
    assert not (tmp_path / "deeper").exists(), "nothing was made where the link leads"
    with pytest.raises(ValueError, match="not a relative path"):
        make_links(workdir, {"../digits": str(target)})


def test_the_trees_of_ended_jobs_are_swept(tmp_path: Path) -> None:
    import time

    from sqlalchemy import insert

    from mlyard.paths import Paths
    from mlyard.server.store.db import Database
    from mlyard.server.store.rows import JobRow
    from mlyard.server.workers.dataset_views import DatasetViewSweep

    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    now = time.time()
    with database.transaction() as session:
        session.execute(insert(JobRow), [
            dict(id=job_id, name="j", project="default", queue="default", priority=0, status=status,
                 spec={"name": "j", "command": ["true"]}, attempt_count=1, submitted_at=now, updated_at=now)
            for job_id, status in ((1, "SUCCEEDED"), (2, "RUNNING"), (3, "CANCELLED"))])
    paths = Paths(tmp_path)
    store = BlobStore(tmp_path / "blobs")
    for job_id in (1, 2, 3, 4):  # 4: no such job (a database that was reset) is left alone
        build(paths.dataset_view(job_id, "digits"), [("a.txt", stored(store, b"a"))], store)
    DatasetViewSweep(database, paths).sweep()
    assert sorted(entry.name for entry in paths.dataset_views.iterdir()) == ["2", "4"]
    assert store.path_for(stored(store, b"a")).read_bytes() == b"a"
    database.close()
