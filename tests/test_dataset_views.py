"""The trees of the dataset versions a job reads (`storage/trees.py`, built for waiting jobs by
`workers/dataset_views.py`) and their links in a replica's working directory
(`runtime/dataset_links.py`): hard links into the store, closed to writes, never half made, one
of two racing builds kept; a link never replaces the code's own files nor lands outside."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from sqlalchemy import insert

from mlyard.paths import Paths
from mlyard.runtime.dataset_links import make_links
from mlyard.server.control.dataset_views import prepare
from mlyard.server.store.dataset_rows import DatasetFileRow, DatasetReadRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.server.store.rows import JobRow
from mlyard.server.workers import dataset_views as view_worker
from mlyard.server.workers.dataset_views import DatasetViewSweep
from mlyard.spec import DatasetInput
from mlyard.storage import BlobStore, trees
from mlyard.storage.trees import TreeError, build, remove_read_only_tree


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
    with pytest.raises(TreeError, match="lost the blob of 'b.txt'"):
        build(view, files, store)
    assert list(view.parent.iterdir()) == []
    with pytest.raises(TreeError, match="leads out"):
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


def test_two_builds_of_one_tree_keep_the_first_renamed_into_place(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = BlobStore(tmp_path / "blobs")
    files = [("a.txt", stored(store, b"a")), ("train/b.txt", stored(store, b"b"))]
    view = tmp_path / "views" / "7" / "digits"
    link = trees._link_or_copy
    won: list[int] = []

    def other_builder_first(source: Path, target: Path) -> None:
        # This build has begun its partial tree when the other one (the worker, say) finishes.
        monkeypatch.setattr(trees, "_link_or_copy", link)
        build(view, files, store)
        won.append(view.stat().st_ino)
        link(source, target)

    monkeypatch.setattr(trees, "_link_or_copy", other_builder_first)
    build(view, files, store)
    assert won == [view.stat().st_ino], "the tree renamed first stays"
    assert [entry.name for entry in view.parent.iterdir()] == ["digits"], "the losing build left no partial tree"
    assert sorted(path.relative_to(view).as_posix() for path in view.rglob("*") if path.is_file()) == [
        "a.txt", "train/b.txt"]


def jobs_database(tmp_path: Path, statuses: dict[int, str]) -> Database:
    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    now = time.time()
    with database.transaction() as session:
        session.execute(insert(JobRow), [
            dict(id=job_id, name="j", project="default", queue="default", priority=0, status=status,
                 spec={"name": "j", "command": ["true"]}, attempt_count=1, submitted_at=now, updated_at=now)
            for job_id, status in statuses.items()])
    return database


def add_version(database: Database, name: str, files: list[tuple[str, str]], readers: list[int]) -> str:
    """A dataset with one version of `files` that the jobs `readers` read; returns its fingerprint."""
    now, fingerprint = time.time(), f"{len(files):064x}"
    with database.transaction() as session:
        dataset = DatasetRow(project="default", name=name, created_at=now, updated_at=now)
        session.add(dataset)
        session.flush()
        version = DatasetVersionRow(dataset_id=dataset.id, number=1, created_at=now, fingerprint=fingerprint,
                                    file_count=len(files), total_bytes=0)
        session.add(version)
        session.flush()
        session.execute(insert(DatasetFileRow), [dict(version_id=version.id, path=path, digest=digest, size=1)
                                                 for path, digest in files])
        session.execute(insert(DatasetReadRow), [dict(version_id=version.id, job_id=job) for job in readers])
    return fingerprint


def test_the_worker_builds_the_trees_of_waiting_jobs(tmp_path: Path) -> None:
    # 1 queued; 2 running (its start built its trees or failed it); 3 reads nothing; 4 restarting
    # with its tree from the attempt before; 5 queued, a blob of its second input lost.
    database = jobs_database(tmp_path, {1: "QUEUED", 2: "RUNNING", 3: "QUEUED", 4: "RESTARTING", 5: "QUEUED"})
    paths, store = Paths(tmp_path), BlobStore(tmp_path / "blobs")
    files = [("README.md", stored(store, b"# digits")), ("train/0/1.png", stored(store, b"png"))]
    fingerprint = add_version(database, "digits", files, readers=[1, 2, 4, 5])
    add_version(database, "labels", [("labels.csv", "e" * 64)], readers=[5])
    build(paths.dataset_view(4, "digits"), files, store)
    kept = paths.dataset_view(4, "digits").stat().st_ino
    worker = DatasetViewSweep(database, paths, store)

    assert worker.build_waiting() == 2, "jobs 5 and 1"
    view = paths.dataset_view(1, "digits")
    assert os.path.samefile(view / "train" / "0" / "1.png", store.path_for(files[1][1]))
    assert stat.S_IMODE(view.stat().st_mode) == 0o555
    assert not paths.dataset_view(2, "digits").exists() and not (paths.dataset_views / "3").exists()
    assert paths.dataset_view(4, "digits").stat().st_ino == kept
    assert {entry.name for entry in (paths.dataset_views / "5").iterdir()} <= {"digits"}, "nothing half made"
    assert worker.build_waiting() == 0, "a tree that failed is left to the job's start"

    built = view.stat().st_ino
    prepare(database, store, paths, 1, [DatasetInput(name="digits", project="default", version="v1",
                                                     fingerprint=fingerprint)])
    assert view.stat().st_ino == built, "the controller's start finds the tree there"
    database.close()


def test_the_worker_reaches_older_jobs_a_few_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view_worker, "SCAN_ROWS", 2)
    monkeypatch.setattr(view_worker, "JOBS_PER_PASS", 1)
    database = jobs_database(tmp_path, {job_id: "QUEUED" for job_id in (1, 2, 3, 4)})
    paths, store = Paths(tmp_path), BlobStore(tmp_path / "blobs")
    add_version(database, "digits", [("a.txt", stored(store, b"a"))], readers=[1, 2, 3, 4])
    worker = DatasetViewSweep(database, paths, store)
    for newest in (4, 3, 2, 1):
        assert worker.build_waiting() == 1
        assert sorted(int(entry.name) for entry in paths.dataset_views.iterdir()) == list(range(newest, 5))
    assert worker.build_waiting() == 0
    database.close()


def test_the_trees_of_ended_jobs_are_swept(tmp_path: Path) -> None:
    database = jobs_database(tmp_path, {1: "SUCCEEDED", 2: "RUNNING", 3: "CANCELLED"})
    paths = Paths(tmp_path)
    store = BlobStore(tmp_path / "blobs")
    for job_id in (1, 2, 3, 4):  # 4: no such job (a database that was reset) is left alone
        build(paths.dataset_view(job_id, "digits"), [("a.txt", stored(store, b"a"))], store)
    DatasetViewSweep(database, paths, store).sweep()
    assert sorted(entry.name for entry in paths.dataset_views.iterdir()) == ["2", "4"]
    assert store.path_for(stored(store, b"a")).read_bytes() == b"a"
    database.close()
