"""session tokens minted by a login, ended with the token they came from; tokens made with a
password-derived token; a web session's client address

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch:
        batch.add_column(sa.Column('parent_token_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_api_tokens_parent_token_id', 'api_tokens', ['parent_token_id'], ['id'])
        batch.add_column(sa.Column('from_password', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column('bound_address', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch:
        batch.drop_column('bound_address')
        batch.drop_column('from_password')
        batch.drop_constraint('fk_api_tokens_parent_token_id', type_='foreignkey')
        batch.drop_column('parent_token_id')
