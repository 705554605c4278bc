"""projects with members and roles; the audit log

Revision ID: 0008
Revises: 0007
"""

import time

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    projects = op.create_table('projects',
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('quota_gpu', sa.Float(), nullable=True),
    sa.Column('quota_cpu', sa.Float(), nullable=True),
    sa.Column('quota_memory', sa.BigInteger(), nullable=True),
    sa.Column('max_running_jobs', sa.Integer(), nullable=True),
    sa.Column('max_storage_bytes', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('project_members',
    sa.Column('project', sa.String(length=63), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['project'], ['projects.name'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('project', 'user_id')
    )
    op.create_table('audit_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('actor', sa.String(length=160), nullable=False),
    sa.Column('method', sa.String(length=10), nullable=False),
    sa.Column('route', sa.String(length=255), nullable=False),
    sa.Column('target', sa.String(length=255), nullable=True),
    sa.Column('status', sa.Integer(), nullable=False),
    sa.Column('address', sa.String(length=64), nullable=True),
    sa.Column('details', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_audit_events_at', 'audit_events', ['at'], unique=False)
    # Every project named so far becomes a project, so existing jobs and queues keep theirs.
    connection = op.get_bind()
    names = {'default'}
    for table in ('jobs', 'queues'):
        names |= {row[0] for row in connection.execute(sa.text(f'SELECT DISTINCT project FROM {table}'))}
    now = time.time()
    op.bulk_insert(projects, [{'name': name, 'created_at': now} for name in sorted(names)])


def downgrade() -> None:
    op.drop_index('ix_audit_events_at', table_name='audit_events')
    op.drop_table('audit_events')
    op.drop_table('project_members')
    op.drop_table('projects')
