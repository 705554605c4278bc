"""volumes: a project's read-write directories with a size quota, and the jobs that mount them

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'volumes',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project', sa.String(length=63), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('claim', sa.String(length=63), nullable=False),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('size_bytes', sa.BigInteger(), nullable=False),
        sa.Column('used_bytes', sa.BigInteger(), nullable=True),
        sa.Column('measured_at', sa.Float(), nullable=True),
        sa.Column('over_quota_since', sa.Float(), nullable=True),
        sa.Column('enforcement', sa.Text(), nullable=True),
        sa.Column('created_by', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(['project'], ['projects.name']),
        sa.ForeignKeyConstraint(['created_by'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('project', 'name', name='uq_volumes_project_name'),
        sa.UniqueConstraint('claim'),
    )
    op.create_table(
        'volume_mounts',
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('volume_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['volume_id'], ['volumes.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('job_id', 'volume_id'),
    )
    op.create_index('ix_volume_mounts_volume_id', 'volume_mounts', ['volume_id'])


def downgrade() -> None:
    op.drop_index('ix_volume_mounts_volume_id', table_name='volume_mounts')
    op.drop_table('volume_mounts')
    op.drop_table('volumes')
