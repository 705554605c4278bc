"""a replica's share of a core it shares with others (a request below one core), in thousandths

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('replicas') as batch:
        batch.add_column(sa.Column('cpu_millicores', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('replicas') as batch:
        batch.drop_column('cpu_millicores')
