"""ORM rows of labeling tasks: a task on a dataset version, who annotates and reviews it, its
items (the version's files, or the lines of its .jsonl files), and each annotator's labels of
each item with their review."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from mlyard.server.store.rows import Base, UserRow


class LabelingTaskRow(Base):
    __tablename__ = "labeling_tasks"
    __table_args__ = (UniqueConstraint("project", "name", name="uq_labeling_tasks_project_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(ForeignKey("projects.name"))
    name: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    """classification, multilabel, boxes or text."""
    classes: Mapped[list[str]] = mapped_column(JSON)
    annotators_per_item: Mapped[int] = mapped_column(Integer, default=1)
    review: Mapped[bool] = mapped_column(Boolean, default=False)
    instructions: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)

    creator: Mapped[UserRow | None] = relationship(lazy="joined")


class LabelingMemberRow(Base):
    """Who works on a task: `annotator` or `reviewer`."""

    __tablename__ = "labeling_members"

    task_id: Mapped[int] = mapped_column(ForeignKey("labeling_tasks.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True)
    role: Mapped[str] = mapped_column(String(16), primary_key=True)


class LabelingItemRow(Base):
    """What is labeled once: a file of the version, or (`line` set) one line of a .jsonl file."""

    __tablename__ = "labeling_items"
    __table_args__ = (Index("ix_labeling_items_task_position", "task_id", "position", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("labeling_tasks.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(1024))
    line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    prefill: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    """`{"labels": [...], "boxes": [{label, x, y, width, height}]}` from the task's import, or
    NULL (SQL's, so that counting pre-filled items is `IS NOT NULL`)."""


class AnnotationRow(Base):
    """One annotator's labels of one item, saved as they are made: `draft` until submitted, then
    `submitted`, and with a review step `accepted` or `rejected` (back to the annotator with the
    reviewer's comment)."""

    __tablename__ = "annotations"
    __table_args__ = (UniqueConstraint("item_id", "user_id", name="uq_annotations_item_user"),
                      Index("ix_annotations_task_user", "task_id", "user_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("labeling_tasks.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("labeling_items.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    labels: Mapped[list[str]] = mapped_column(JSON, default=list)
    boxes: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), default="submitted")
    updated_at: Mapped[float] = mapped_column(Float)
    comment: Mapped[str] = mapped_column(Text, default="")
    """The reviewer's, with a rejection."""
    reviewed_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    reviewed_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    user: Mapped[UserRow] = relationship(foreign_keys=[user_id], lazy="joined")
