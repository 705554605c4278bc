"""dataset reads: which jobs read which dataset versions (lineage)

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'dataset_reads',
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('version_id', 'job_id'),
    )
    op.create_index(op.f('ix_dataset_reads_job_id'), 'dataset_reads', ['job_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_dataset_reads_job_id'), table_name='dataset_reads')
    op.drop_table('dataset_reads')
