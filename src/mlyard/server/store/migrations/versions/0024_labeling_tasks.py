"""labeling tasks: tasks on dataset versions, their annotators and reviewers, items and annotations

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'labeling_tasks',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project', sa.String(length=63), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('classes', sa.JSON(), nullable=False),
        sa.Column('annotators_per_item', sa.Integer(), nullable=False),
        sa.Column('review', sa.Boolean(), nullable=False),
        sa.Column('instructions', sa.Text(), nullable=False),
        sa.Column('created_by', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['project'], ['projects.name']),
        sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['created_by'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('project', 'name', name='uq_labeling_tasks_project_name'),
    )
    op.create_index('ix_labeling_tasks_version_id', 'labeling_tasks', ['version_id'])
    op.create_table(
        'labeling_members',
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(['task_id'], ['labeling_tasks.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_id', 'user_id', 'role'),
    )
    op.create_index('ix_labeling_members_user_id', 'labeling_members', ['user_id'])
    op.create_table(
        'labeling_items',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('path', sa.String(length=1024), nullable=False),
        sa.Column('line', sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(['task_id'], ['labeling_tasks.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_labeling_items_task_position', 'labeling_items', ['task_id', 'position'], unique=True)
    op.create_table(
        'annotations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('item_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('labels', sa.JSON(), nullable=False),
        sa.Column('boxes', sa.JSON(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.Column('comment', sa.Text(), nullable=False),
        sa.Column('reviewed_by', sa.Integer(), nullable=True),
        sa.Column('reviewed_at', sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(['task_id'], ['labeling_tasks.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['item_id'], ['labeling_items.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['reviewed_by'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('item_id', 'user_id', name='uq_annotations_item_user'),
    )
    op.create_index('ix_annotations_task_user', 'annotations', ['task_id', 'user_id'])


def downgrade() -> None:
    op.drop_index('ix_annotations_task_user', table_name='annotations')
    op.drop_table('annotations')
    op.drop_index('ix_labeling_items_task_position', table_name='labeling_items')
    op.drop_table('labeling_items')
    op.drop_index('ix_labeling_members_user_id', table_name='labeling_members')
    op.drop_table('labeling_members')
    op.drop_index('ix_labeling_tasks_version_id', table_name='labeling_tasks')
    op.drop_table('labeling_tasks')
