"""passwords of users; kinds and expiry of tokens

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('password_hash', sa.String(length=255), nullable=True))
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), nullable=False, server_default='api'))
        batch_op.add_column(sa.Column('expires_at', sa.Float(), nullable=True))
    # Tokens handed to a job's replicas existed before kinds did.
    op.execute("UPDATE api_tokens SET kind = 'job' WHERE job_id IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_column('expires_at')
        batch_op.drop_column('kind')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('password_hash')
