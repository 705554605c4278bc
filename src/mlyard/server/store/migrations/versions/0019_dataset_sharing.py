"""dataset sharing: grants to other projects, access requests, and claims and transfers of
ownership

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def _answer_columns() -> list[sa.Column]:
    return [
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('answered_by', sa.String(length=160), nullable=True),
        sa.Column('answered_at', sa.Float(), nullable=True),
        sa.Column('answer', sa.Text(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        'dataset_grants',
        sa.Column('dataset_id', sa.Integer(), sa.ForeignKey('datasets.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('project', sa.String(length=63), sa.ForeignKey('projects.name', ondelete='CASCADE'),
                  primary_key=True),
        sa.Column('granted_by', sa.String(length=160), nullable=False),
        sa.Column('granted_at', sa.Float(), nullable=False),
    )
    op.create_index('ix_dataset_grants_project', 'dataset_grants', ['project'])
    op.create_table(
        'dataset_access_requests',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('dataset_id', sa.Integer(), sa.ForeignKey('datasets.id', ondelete='CASCADE'), nullable=False),
        sa.Column('project', sa.String(length=63), sa.ForeignKey('projects.name', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'), nullable=False),
        *_answer_columns(),
    )
    op.create_index('ix_dataset_access_requests_dataset', 'dataset_access_requests', ['dataset_id', 'status'])
    op.create_index('ix_dataset_access_requests_user_id', 'dataset_access_requests', ['user_id'])
    op.create_table(
        'dataset_claims',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('dataset_id', sa.Integer(), sa.ForeignKey('datasets.id', ondelete='CASCADE'), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('to_project', sa.String(length=63), sa.ForeignKey('projects.name', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('to_user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'), nullable=False),
        sa.Column('requested_by', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'), nullable=False),
        *_answer_columns(),
    )
    op.create_index('ix_dataset_claims_status', 'dataset_claims', ['status'])
    op.create_index('ix_dataset_claims_dataset_id', 'dataset_claims', ['dataset_id'])
    op.create_index('ix_dataset_claims_requested_by', 'dataset_claims', ['requested_by'])


def downgrade() -> None:
    op.drop_index('ix_dataset_claims_requested_by', table_name='dataset_claims')
    op.drop_index('ix_dataset_claims_dataset_id', table_name='dataset_claims')
    op.drop_index('ix_dataset_claims_status', table_name='dataset_claims')
    op.drop_table('dataset_claims')
    op.drop_index('ix_dataset_access_requests_user_id', table_name='dataset_access_requests')
    op.drop_index('ix_dataset_access_requests_dataset', table_name='dataset_access_requests')
    op.drop_table('dataset_access_requests')
    op.drop_index('ix_dataset_grants_project', table_name='dataset_grants')
    op.drop_table('dataset_grants')
