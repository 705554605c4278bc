"""dataset outputs: the datasets a job writes when it succeeds

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'dataset_outputs',
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('project', sa.String(length=63), nullable=False),
        sa.Column('dataset', sa.String(length=63), nullable=False),
        sa.Column('path', sa.String(length=255), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=True),
        sa.Column('message', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('job_id', 'position'),
    )
    op.create_index('ix_dataset_outputs_state', 'dataset_outputs', ['state'])


def downgrade() -> None:
    op.drop_index('ix_dataset_outputs_state', table_name='dataset_outputs')
    op.drop_table('dataset_outputs')
