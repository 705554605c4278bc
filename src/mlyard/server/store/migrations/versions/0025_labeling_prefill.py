"""labeling items' pre-fill: the labels a task's import found for each item

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('labeling_items') as batch:
        batch.add_column(sa.Column('prefill', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('labeling_items') as batch:
        batch.drop_column('prefill')
