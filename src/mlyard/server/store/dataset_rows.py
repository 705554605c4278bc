"""ORM rows of the data center: datasets, their immutable versions and files, aliases and
their moves, who uploaded which file blob (a digest is a key only for its uploaders and the
readers of a version that holds it), and sharing: other projects' grants, access requests, and
claims and transfers of ownership."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from mlyard.server.store.rows import Base, UserRow


class DatasetRow(Base):
    """A dataset of a project. `owner_id` is None for data an administrator registered, which
    nobody has claimed yet."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("project", "name", name="uq_datasets_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"))
    name: Mapped[str] = mapped_column(String(64))
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    description: Mapped[str] = mapped_column(Text, default="")
    licence: Mapped[str | None] = mapped_column(String(128), nullable=True)
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    visibility: Mapped[str] = mapped_column(String(16), default="project")
    """project (its members see it) or catalog (anyone sees its card)."""
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    owner: Mapped[UserRow | None] = relationship(lazy="joined")


class DatasetVersionRow(Base):
    """vN of a dataset: immutable once written. `fingerprint` is the sha256 of its sorted
    (path, digest) pairs: two versions with the same files have the same one."""

    __tablename__ = "dataset_versions"
    __table_args__ = (UniqueConstraint("dataset_id", "number", name="uq_dataset_versions_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id"), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    fingerprint: Mapped[str] = mapped_column(String(64))
    file_count: Mapped[int] = mapped_column(Integer)
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    statistics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    source_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), nullable=True)
    """The job whose outputs it holds, if a job made it."""

    creator: Mapped[UserRow | None] = relationship(lazy="joined")


class VersionFileColumns:
    """What a file row of a version (a dataset's, a model's) holds besides its `version_id`, which
    comes first in the primary key: its path in the version, its blob, size and media type."""

    path: Mapped[str] = mapped_column(String(1024), primary_key=True, sort_order=1)
    digest: Mapped[str] = mapped_column(String(64), sort_order=2)
    size: Mapped[int] = mapped_column(BigInteger, sort_order=3)
    media_type: Mapped[str | None] = mapped_column(String(128), nullable=True, sort_order=4)


class AliasMoveColumns:
    """What a row of an alias's move holds besides the owner's column: from which version to
    which (None: set the first time), by whom and when."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-1)
    alias: Mapped[str] = mapped_column(String(64), sort_order=1)
    from_version: Mapped[int | None] = mapped_column(Integer, nullable=True, sort_order=2)
    to_version: Mapped[int | None] = mapped_column(Integer, nullable=True, sort_order=3)
    moved_by: Mapped[str] = mapped_column(String(160), sort_order=4)
    at: Mapped[float] = mapped_column(Float, sort_order=5)


class DatasetFileRow(VersionFileColumns, Base):
    """One file of a dataset version."""

    __tablename__ = "dataset_files"
    __table_args__ = (Index("ix_dataset_files_digest", "digest"),)

    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id", ondelete="CASCADE"),
                                            primary_key=True)


class DatasetAliasRow(Base):
    """A movable name of a dataset (`latest`, `clean`, `production`) and the version it names."""

    __tablename__ = "dataset_aliases"

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"))
    moved_at: Mapped[float] = mapped_column(Float)


class DatasetAliasMoveRow(AliasMoveColumns, Base):
    """Every move of a dataset's alias."""

    __tablename__ = "dataset_alias_moves"
    __table_args__ = (Index("ix_dataset_alias_moves_dataset", "dataset_id", "alias"),)

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))


class BlobUploaderRow(Base):
    """A file blob a user sent: they may name its digest in a version they make."""

    __tablename__ = "blob_uploaders"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    uploaded_at: Mapped[float] = mapped_column(Float)


class DatasetGrantRow(Base):
    """Another project's readers may read the dataset's files (`read`, the only right yet)."""

    __tablename__ = "dataset_grants"
    __table_args__ = (Index("ix_dataset_grants_project", "project"),)

    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name", ondelete="CASCADE"), primary_key=True)
    granted_by: Mapped[str] = mapped_column(String(160))
    granted_at: Mapped[float] = mapped_column(Float)


class _Asked:
    """What a request and a claim share: why it was asked, and its answer."""

    message: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), default="pending")
    created_at: Mapped[float] = mapped_column(Float)
    answered_by: Mapped[str | None] = mapped_column(String(160), nullable=True)
    answered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    answer: Mapped[str] = mapped_column(Text, default="")
    """Why, when refused."""


class DatasetAccessRequestRow(_Asked, Base):
    """A user asking, for one of their projects, to read a dataset: `pending`, then `granted`
    (which made the project's grant) or `refused`."""

    __tablename__ = "dataset_access_requests"
    __table_args__ = (Index("ix_dataset_access_requests_dataset", "dataset_id", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    project: Mapped[str] = mapped_column(ForeignKey("projects.name", ondelete="CASCADE"))
    """The project that would read it."""
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)

    requester: Mapped[UserRow] = relationship(lazy="joined")


class DatasetClaimRow(_Asked, Base):
    """Asking to move a dataset to a project and an owner: `claim` (registered, unowned data;
    administrators decide) or `transfer` (asked by its owner; the receiving project's
    maintainers decide). `pending`, then `approved` or `refused`."""

    __tablename__ = "dataset_claims"
    __table_args__ = (Index("ix_dataset_claims_status", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    to_project: Mapped[str] = mapped_column(ForeignKey("projects.name", ondelete="CASCADE"))
    to_user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    """The owner once approved."""
    requested_by: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)

    to_user: Mapped[UserRow] = relationship(foreign_keys=[to_user_id], lazy="joined")
    requester: Mapped[UserRow] = relationship(foreign_keys=[requested_by], lazy="joined")


class DatasetReadRow(Base):
    """Lineage: a job read a version (pinned when it was submitted)."""

    __tablename__ = "dataset_reads"

    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, index=True)


class DatasetOutputRow(Base):
    """A dataset a job writes (its spec's `outputs`, in order): `pending` until the job ends,
    then `stored` (a new version), `unchanged` (the files of the version before), `skipped` (the
    job did not succeed) or `failed` (why in `message`)."""

    __tablename__ = "dataset_outputs"
    __table_args__ = (Index("ix_dataset_outputs_state", "state"),)

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(63))
    dataset: Mapped[str] = mapped_column(String(63))
    path: Mapped[str] = mapped_column(String(255), default="")
    """The folder of the job's output directory; empty: all of it."""
    state: Mapped[str] = mapped_column(String(16), default="pending")
    version_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id", ondelete="SET NULL"),
                                                   nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")


class DatasetCheckRow(Base):
    """A cleaning report of a version, made by a job (`services/datasets/checks.py`): `running`
    until the job ends, then `done` (the report stored) or `failed` (why in `message`)."""

    __tablename__ = "dataset_checks"
    __table_args__ = (Index("ix_dataset_checks_state", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(16), default="running")
    distance: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The report's counts, kept apart: a listing reads them without loading whole reports."""
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, deferred=True)

    creator: Mapped[UserRow | None] = relationship(lazy="joined")
