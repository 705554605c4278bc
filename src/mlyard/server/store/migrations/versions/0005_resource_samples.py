"""node and job resource samples, node inventory

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('node_samples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('node', sa.String(length=255), nullable=False),
    sa.Column('period', sa.Integer(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('cpu_percent', sa.Float(), nullable=False),
    sa.Column('cpu_per_core', sa.JSON(), nullable=False),
    sa.Column('load_1', sa.Float(), nullable=False),
    sa.Column('load_5', sa.Float(), nullable=False),
    sa.Column('load_15', sa.Float(), nullable=False),
    sa.Column('memory_used', sa.BigInteger(), nullable=False),
    sa.Column('memory_total', sa.BigInteger(), nullable=False),
    sa.Column('disk_read_rate', sa.Float(), nullable=False),
    sa.Column('disk_write_rate', sa.Float(), nullable=False),
    sa.Column('net_rx_rate', sa.Float(), nullable=False),
    sa.Column('net_tx_rate', sa.Float(), nullable=False),
    sa.Column('gpus', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('node_samples', schema=None) as batch_op:
        batch_op.create_index('ix_node_samples_node_period_at', ['node', 'period', 'at'], unique=False)
        batch_op.create_index('ix_node_samples_period_at', ['period', 'at'], unique=False)

    op.create_table('job_samples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('replica', sa.String(length=127), nullable=True),
    sa.Column('rank', sa.Integer(), nullable=True),
    sa.Column('node', sa.String(length=255), nullable=False),
    sa.Column('period', sa.Integer(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('replicas', sa.Integer(), nullable=False),
    sa.Column('processes', sa.Integer(), nullable=False),
    sa.Column('cpu_percent', sa.Float(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('gpu_memory_bytes', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('job_samples', schema=None) as batch_op:
        batch_op.create_index('ix_job_samples_job_period_at', ['job_id', 'period', 'at'], unique=False)
        batch_op.create_index('ix_job_samples_period_at', ['period', 'at'], unique=False)

    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('inventory', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('inventory')
    op.drop_table('job_samples')
    op.drop_table('node_samples')
