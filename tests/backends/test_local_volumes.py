"""The local backend's volumes: directories of MLYARD_HOME/volumes made, measured and removed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mlyard.backends.base import AttemptLaunch, VolumeMount
from mlyard.backends.local import volumes as volumes_module
from mlyard.backends.local.volumes import DirectoryVolumes, measure, process_volume_links
from mlyard.errors import MlyardError

CLAIM = "mlyard-vol-0123456789abcdef"


def volumes_in(root: Path) -> DirectoryVolumes:
    keeper = DirectoryVolumes()
    keeper.volumes_root = root / "volumes"
    return keeper


def test_a_volume_is_a_directory_every_account_writes_under_a_root_none_lists(tmp_path: Path) -> None:
    keeper = volumes_in(tmp_path)
    assert keeper.create_volume(CLAIM, 1024) is None, "no CephFS here: the server measures it"
    assert keeper.create_volume(CLAIM, 1024) is None, "made twice is made once"
    directory = Path(keeper.volume_directory(CLAIM))
    assert directory == tmp_path / "volumes" / CLAIM
    assert stat.S_IMODE(directory.stat().st_mode) == 0o777
    assert stat.S_IMODE(directory.parent.stat().st_mode) == 0o711
    assert keeper.volume_usage(CLAIM) == 0


def test_usage_counts_each_file_once_and_follows_no_link(tmp_path: Path) -> None:
    keeper = volumes_in(tmp_path)
    keeper.create_volume(CLAIM, 1024)
    directory = Path(keeper.volume_directory(CLAIM))
    (directory / "a" / "b").mkdir(parents=True)
    (directory / "a" / "b" / "weights").write_bytes(b"x" * 3000)
    os.link(directory / "a" / "b" / "weights", directory / "again")
    (directory / "notes").write_bytes(b"y" * 500)
    outside = tmp_path / "outside"
    outside.write_bytes(b"z" * 100_000)
    (directory / "elsewhere").symlink_to(outside)
    (directory / "tree").symlink_to(tmp_path, target_is_directory=True)
    assert measure(directory) == keeper.volume_usage(CLAIM) == 3500


def test_removing_a_volume_takes_its_files_even_read_only_ones(tmp_path: Path) -> None:
    keeper = volumes_in(tmp_path)
    keeper.create_volume(CLAIM, 1024)
    directory = Path(keeper.volume_directory(CLAIM))
    (directory / "frozen").mkdir()
    (directory / "frozen" / "file").write_text("kept?")
    os.chmod(directory / "frozen", 0o555)
    keeper.remove_volume(CLAIM)
    keeper.remove_volume(CLAIM)  # already gone: nothing to do
    assert list((tmp_path / "volumes").iterdir()) == []
    assert keeper.volume_usage(CLAIM) is None


def test_only_a_claim_names_a_volume_and_a_server_without_a_root_keeps_none(tmp_path: Path) -> None:
    keeper = volumes_in(tmp_path)
    for name in ("../escape", "mlyard-vol-../../x", "mlyard-vol-0123456789ABCDEF"):
        with pytest.raises(MlyardError, match="not a volume's claim"):
            keeper.volume_directory(name)
    with pytest.raises(MlyardError, match="keeps no volumes"):
        DirectoryVolumes().create_volume(CLAIM, 1)


def test_a_process_replica_links_relative_mounts_and_refuses_an_absolute_one() -> None:
    relative = AttemptLaunch(job_id=1, attempt=1, replicas=(), volumes=(VolumeMount("cache", CLAIM, "volumes/cache"),),
                             volume_directories={CLAIM: "/home/v/" + CLAIM})
    assert process_volume_links(relative) == {"volumes/cache": "/home/v/" + CLAIM}
    absolute = AttemptLaunch(job_id=1, attempt=1, replicas=(), volumes=(VolumeMount("cache", CLAIM, "/scratch"),),
                             volume_directories={CLAIM: "/home/v/" + CLAIM})
    with pytest.raises(MlyardError, match="only a container can have"):
        process_volume_links(absolute)


MEASURE_AS_NOBODY = """
import sys
from pathlib import Path
from mlyard.backends.local.volumes import Unmeasurable, measure
try:
    print(measure(Path(sys.argv[1])))
except Unmeasurable as error:
    print("UNMEASURABLE", error)
"""


SYSTEM_PYTHON = "/usr/bin/python3"
"""Runnable by another account, where the tests' own Python may lie under a closed /root; the
module measured needs nothing beyond the standard library."""


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="makes files of another account and measures as it")
def test_a_folder_a_job_closed_is_opened_again_or_the_volume_is_unmeasurable() -> None:
    import shutil
    import subprocess
    import tempfile

    nobody = 65534
    root = Path(tempfile.mkdtemp(prefix="mlyard-volume-"))
    try:
        os.chmod(root, 0o755)
        volume = root / "volume"
        (volume / "closed").mkdir(parents=True)
        (volume / "closed" / "weights").write_bytes(b"x" * 1000)
        for path in (volume, volume / "closed", volume / "closed" / "weights"):
            os.chown(path, nobody, nobody)
        os.chmod(volume / "closed", 0)  # the job's own folder, closed: the server (its owner here) opens it

        def measured() -> str:
            result = subprocess.run([SYSTEM_PYTHON, "-c", MEASURE_AS_NOBODY, str(volume)], capture_output=True,
                                    text=True, check=True, user=nobody, group=nobody,
                                    env={"PYTHONPATH": str(Path(volumes_module.__file__).parents[3])})
            return result.stdout.strip()

        assert measured() == "1000"
        (volume / "other").mkdir()  # a folder of another account (a container's root), closed
        (volume / "other" / "hidden").write_bytes(b"y" * 5000)
        os.chmod(volume / "other", 0)
        assert measured().startswith("UNMEASURABLE cannot list"), "unknown contents are not taken as empty"
    finally:
        os.chmod(root / "volume" / "other", 0o755) if (root / "volume" / "other").exists() else None
        shutil.rmtree(root)
