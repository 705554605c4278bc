"""dataset checks: cleaning reports of dataset versions, made by jobs

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'dataset_checks',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('distance', sa.Integer(), nullable=False),
        sa.Column('created_by', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('finished_at', sa.Float(), nullable=True),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('summary', sa.JSON(), nullable=True),
        sa.Column('report', sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(['version_id'], ['dataset_versions.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['created_by'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_dataset_checks_state', 'dataset_checks', ['state'])
    op.create_index('ix_dataset_checks_version_id', 'dataset_checks', ['version_id'])
    op.create_index('ix_dataset_checks_job_id', 'dataset_checks', ['job_id'])


def downgrade() -> None:
    op.drop_index('ix_dataset_checks_job_id', table_name='dataset_checks')
    op.drop_index('ix_dataset_checks_version_id', table_name='dataset_checks')
    op.drop_index('ix_dataset_checks_state', table_name='dataset_checks')
    op.drop_table('dataset_checks')
