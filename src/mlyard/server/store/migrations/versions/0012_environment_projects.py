"""environments belong to a project

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Environments built before projects owned them belong to the default project, where jobs
    # that name no project go.
    with op.batch_alter_table('environments') as batch_op:
        batch_op.add_column(sa.Column('project', sa.String(length=63), nullable=False, server_default='default'))
        batch_op.create_index('ix_environments_project', ['project'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('environments') as batch_op:
        batch_op.drop_index('ix_environments_project')
        batch_op.drop_column('project')
