"""restart bookkeeping and idempotency keys

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('restart_count', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('restart_at', sa.Float(), nullable=True))
    op.create_table('idempotency_keys',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('caller', sa.String(length=160), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('request_sha256', sa.String(length=64), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('caller', 'key', name='uq_idempotency_keys_caller_key')
    )
    with op.batch_alter_table('idempotency_keys', schema=None) as batch_op:
        batch_op.create_index('ix_idempotency_keys_created_at', ['created_at'], unique=False)


def downgrade() -> None:
    op.drop_table('idempotency_keys')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('restart_at')
        batch_op.drop_column('restart_count')
