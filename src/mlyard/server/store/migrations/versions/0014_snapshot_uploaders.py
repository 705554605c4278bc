"""who uploaded each snapshot: a digest is a key only for them and the projects keeping it

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('snapshot_uploaders',
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('uploaded_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['digest'], ['snapshots.digest'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('digest', 'user_id')
    )
    # The uploader each snapshot recorded so far keeps using it.
    op.execute(sa.text(
        'INSERT INTO snapshot_uploaders (digest, user_id, uploaded_at) '
        'SELECT digest, uploaded_by, created_at FROM snapshots WHERE uploaded_by IS NOT NULL'))


def downgrade() -> None:
    op.drop_table('snapshot_uploaders')
