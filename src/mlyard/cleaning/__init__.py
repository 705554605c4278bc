"""Cleaning reports of a dataset version: duplicates, near-duplicates across splits, corrupt and
mislabelled files, computed inside a job over the version's read-only files
(`python -m mlyard.cleaning`, `report.build_report`). Image hashing and label issues need the
`cleaning` extra (`pip install 'mlyard[cleaning]'`); this package imports them only when used,
so the server reads labels (`labels.py`) without them.
"""

from mlyard.cleaning.extras import CleaningError

__all__ = ["CleaningError"]
