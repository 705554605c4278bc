"""ORM rows of project volumes: named read-write directories with a size quota, and the jobs
that mount them."""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from mlyard.server.store.rows import Base, UserRow


class VolumeRow(Base):
    """A volume of a project. `claim` names its storage at the backend (a directory of
    `MLYARD_HOME/volumes`, a PersistentVolumeClaim): random, so a name used again never finds
    an earlier volume's files, and no other job can guess where it lies."""

    __tablename__ = "volumes"
    __table_args__ = (UniqueConstraint("project", "name", name="uq_volumes_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"))
    name: Mapped[str] = mapped_column(String(64))
    claim: Mapped[str] = mapped_column(String(63), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    used_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    measured_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    over_quota_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    enforcement: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)

    creator: Mapped[UserRow | None] = relationship(lazy="joined")


class VolumeMountRow(Base):
    """A job mounts a volume: written with the job, so that removing the volume waits for it."""

    __tablename__ = "volume_mounts"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    volume_id: Mapped[int] = mapped_column(ForeignKey("volumes.id", ondelete="CASCADE"), primary_key=True,
                                           index=True)
    position: Mapped[int] = mapped_column(Integer)
    """Its place in the spec's `volumes`."""
