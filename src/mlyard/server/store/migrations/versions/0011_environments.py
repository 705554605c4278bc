"""environments: a base plus packages, built into an image or a virtualenv

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('environments',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('base', sa.String(length=255), nullable=False),
    sa.Column('requirements', sa.Text(), nullable=True),
    sa.Column('apt', sa.JSON(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=True),
    sa.Column('content_hash', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('image', sa.String(length=255), nullable=True),
    sa.Column('cached', sa.Boolean(), nullable=False),
    sa.Column('created_by', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('built_at', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['created_by'], ['users.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_index('ix_environments_content_hash', 'environments', ['content_hash'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_environments_content_hash', table_name='environments')
    op.drop_table('environments')
