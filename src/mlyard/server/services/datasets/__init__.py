"""The data center's datasets: a project's named collections of files, kept as immutable
versions over the content-addressed store, with aliases that move and remember every move.

- `access.py`: who sees a dataset (its project's readers; anyone, for a catalog card), who reads
  its files and who writes to it; what a caller may not see does not exist for them.
- `catalog.py`: creating, listing and showing datasets.
- `manifests.py`: reading a version's manifest (every path checked) and its statistics.
- `versions.py`: making a version from a manifest, listing, showing, paging its files, a file's
  bytes, and the difference of two versions.
- `aliases.py`: moving an alias and its history.
- `sharing.py`: grants to other projects and access requests.
- `registration.py`: data on the server's disks (under MLYARD_DATA_ROOTS) made a dataset nobody owns.
- `claims.py`: claims of unowned data and transfers of ownership, and deciding them.

File blobs arrive through `services/blobs.py`; a digest is a key only for its uploaders and the
readers of a version that holds it.
"""
