"""queues, attained service and preemption bookkeeping

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('queues',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('project', sa.String(length=63), nullable=False),
    sa.Column('quota_gpu', sa.Float(), nullable=True),
    sa.Column('quota_cpu', sa.Float(), nullable=True),
    sa.Column('quota_memory', sa.BigInteger(), nullable=True),
    sa.Column('borrow_gpu', sa.Float(), nullable=True),
    sa.Column('borrow_cpu', sa.Float(), nullable=True),
    sa.Column('borrow_memory', sa.BigInteger(), nullable=True),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    # Jobs that exist already start from zero service and no preemption.
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('attained_service', sa.Float(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('attained_time', sa.Float(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('queued_since', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('wait_reason', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('preemption_count', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('preemption_count')
        batch_op.drop_column('wait_reason')
        batch_op.drop_column('queued_since')
        batch_op.drop_column('attained_time')
        batch_op.drop_column('attained_service')

    op.drop_table('queues')
