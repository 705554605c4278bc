"""The model registry: a project's models, kept as immutable versions over the content-addressed
store (the datasets' store, blobs and manifests), with aliases that move and remember every move,
and lineage to the job, code and dataset versions that produced each version.

- `access.py`: who sees a model (its project's readers), who adds to it (its members) and who
  removes from it (its owner, its project's maintainers); a job's token reaches a model only to
  register its own files (`from_jobs.py`).
- `catalog.py`: creating, listing and showing models.
- `versions.py`: making a version from an uploaded manifest, listing, showing, its files and bytes.
- `from_jobs.py`: a version from the files a job left in its checkpoint directory, with its lineage.
- `inspection.py`: a version's statistics, from safetensors headers and JSON configs only: the
  server never loads (unpickles) a model file.
- `aliases.py`: moving an alias and its history (`services/version_aliases.py`, shared with datasets).
- `removal.py`: removing a version nothing needs, and a model with none left.
"""
