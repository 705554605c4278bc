"""ORM rows of the model registry: models of a project, their immutable versions (files in the
content-addressed store, format, metrics, lineage), and aliases with their moves (written by
`services/version_aliases.move` only)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from mlyard.server.store.dataset_rows import AliasMoveColumns, VersionFileColumns
from mlyard.server.store.rows import Base, UserRow


class ModelRow(Base):
    """A model of a project (`task`: what it solves, free text)."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("project", "name", name="uq_models_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"))
    name: Mapped[str] = mapped_column(String(64))
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    description: Mapped[str] = mapped_column(Text, default="")
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    task: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    owner: Mapped[UserRow | None] = relationship(lazy="joined")


class ModelVersionRow(Base):
    """vN of a model: immutable once written. Lineage: the job and attempt that produced it, that
    job's code snapshot, the dataset versions it read (`datasets`: [{project, dataset,
    version}], names kept even once a dataset version is removed) and the version it was
    fine-tuned from (`parent_id`, of any model)."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "number", name="uq_model_versions_number"),
                      Index("ix_model_versions_parent", "parent_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    format: Mapped[str] = mapped_column(String(32))
    framework_version: Mapped[str] = mapped_column(String(64), default="")
    signature: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    metrics: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    message: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    fingerprint: Mapped[str] = mapped_column(String(64))
    file_count: Mapped[int] = mapped_column(Integer)
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    statistics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), nullable=True)
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    snapshot: Mapped[str | None] = mapped_column(String(64), nullable=True)
    datasets: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"), nullable=True)

    creator: Mapped[UserRow | None] = relationship(lazy="joined")


class ModelFileRow(VersionFileColumns, Base):
    """One file of a model version."""

    __tablename__ = "model_files"
    __table_args__ = (Index("ix_model_files_digest", "digest"),)

    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"), primary_key=True)


class ModelAliasRow(Base):
    """A movable name of a model (`production`, `staging`, `latest`) and the version it names."""

    __tablename__ = "model_aliases"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))
    moved_at: Mapped[float] = mapped_column(Float)


class ModelAliasMoveRow(AliasMoveColumns, Base):
    """Every move of a model's alias."""

    __tablename__ = "model_alias_moves"
    __table_args__ = (Index("ix_model_alias_moves_model", "model_id", "alias"),)

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
