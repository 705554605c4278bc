"""code snapshots each project keeps, for its storage limit

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('project_snapshots',
    sa.Column('project', sa.String(length=63), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('first_used_at', sa.Float(), nullable=False),
    sa.Column('last_used_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['digest'], ['snapshots.digest'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('project', 'digest')
    )
    # The code of every job so far counts for its project.
    op.execute(sa.text(
        'INSERT INTO project_snapshots (project, digest, size, first_used_at, last_used_at) '
        'SELECT jobs.project, jobs.snapshot, snapshots.size, MIN(jobs.submitted_at), MAX(jobs.submitted_at) '
        'FROM jobs JOIN snapshots ON snapshots.digest = jobs.snapshot '
        'JOIN projects ON projects.name = jobs.project '
        'GROUP BY jobs.project, jobs.snapshot, snapshots.size'))


def downgrade() -> None:
    op.drop_table('project_snapshots')
