"""why a replica is in its state, as its backend put it (out of memory, unschedulable)

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('replicas') as batch:
        batch.add_column(sa.Column('reason', sa.String(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('replicas') as batch:
        batch.drop_column('reason')
