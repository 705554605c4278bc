"""The dataset versions a job reads and the volumes it mounts, shown in its working directory:
`data/digits` there is a symbolic link to the version's read-only tree (`MLYARD_DATASET_DIGITS`),
which the backend mounts read-only or keeps closed to writes by file modes; `volumes/scratch` one
to the volume's directory (`MLYARD_VOLUME_SCRATCH`).

Imports nothing of mlyard: the launcher loads it at the start of every replica that reads one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def make_links(workdir: Path, links: Mapping[str, str]) -> None:
    """Links each relative path of `links` below `workdir` to its target. A path the code
    already holds is an error, not silently shadowed or replaced."""
    for relative, target in sorted(links.items()):
        parts = Path(relative).parts
        if not parts or Path(relative).is_absolute() or ".." in parts:
            raise ValueError(f"mount path {relative!r} is not a relative path")
        folder = workdir
        for part in parts[:-1]:
            folder = folder / part
            # Made as the launcher's account, maybe root: a link of the code's must not lead it elsewhere.
            if folder.is_symlink():
                raise ValueError(f"mount path {relative!r} leads out of the job's working directory through "
                                 f"the link {folder.relative_to(workdir)}")
            if not folder.exists():
                folder.mkdir()
        link = folder / parts[-1]
        if os.path.lexists(link):
            raise FileExistsError(f"the job's code already has {relative!r}, where a dataset or volume it mounts "
                                  "should be: choose another path for it")
        os.symlink(target, link, target_is_directory=True)
