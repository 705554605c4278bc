"""job revisions: the controller reads only the jobs changed since its last pass; indexes for listings

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    revisions = op.create_table(
        'job_revisions',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('value', sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(revisions, [{'id': 1, 'value': 0}])
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('revision', sa.BigInteger(), server_default='0', nullable=False))
        batch.create_index('ix_jobs_revision', ['revision'])
        batch.create_index('ix_jobs_project_status', ['project', 'status'])
        batch.create_index('ix_jobs_queue_status', ['queue', 'status'])
    op.create_index('ix_attempts_unfinished', 'attempts', ['id'], sqlite_where=sa.text('finished_at IS NULL'),
                    postgresql_where=sa.text('finished_at IS NULL'))


def downgrade() -> None:
    op.drop_index('ix_attempts_unfinished', table_name='attempts')
    with op.batch_alter_table('jobs') as batch:
        batch.drop_index('ix_jobs_queue_status')
        batch.drop_index('ix_jobs_project_status')
        batch.drop_index('ix_jobs_revision')
        batch.drop_column('revision')
    op.drop_table('job_revisions')
