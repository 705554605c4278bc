"""datasets: versions as lists of content-addressed files, aliases with their moves, and the
uploaders of file blobs

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'datasets',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('project', sa.String(length=63), sa.ForeignKey('projects.name'), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('owner_id', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('licence', sa.String(length=128), nullable=True),
        sa.Column('tags', sa.JSON(), nullable=False),
        sa.Column('visibility', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.UniqueConstraint('project', 'name', name='uq_datasets_project_name'),
    )
    op.create_table(
        'dataset_versions',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('dataset_id', sa.Integer(), sa.ForeignKey('datasets.id', ondelete='CASCADE'), nullable=False),
        sa.Column('number', sa.Integer(), nullable=False),
        sa.Column('parent_id', sa.Integer(), sa.ForeignKey('dataset_versions.id'), nullable=True),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('created_by', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('file_count', sa.Integer(), nullable=False),
        sa.Column('total_bytes', sa.BigInteger(), nullable=False),
        sa.Column('statistics', sa.JSON(), nullable=False),
        sa.Column('source_job_id', sa.Integer(), sa.ForeignKey('jobs.id'), nullable=True),
        sa.UniqueConstraint('dataset_id', 'number', name='uq_dataset_versions_number'),
    )
    op.create_table(
        'dataset_files',
        sa.Column('version_id', sa.Integer(), sa.ForeignKey('dataset_versions.id', ondelete='CASCADE'),
                  primary_key=True),
        sa.Column('path', sa.String(length=1024), primary_key=True),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('size', sa.BigInteger(), nullable=False),
        sa.Column('media_type', sa.String(length=128), nullable=True),
    )
    op.create_index('ix_dataset_files_digest', 'dataset_files', ['digest'])
    op.create_table(
        'dataset_aliases',
        sa.Column('dataset_id', sa.Integer(), sa.ForeignKey('datasets.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('name', sa.String(length=64), primary_key=True),
        sa.Column('version_id', sa.Integer(), sa.ForeignKey('dataset_versions.id'), nullable=False),
        sa.Column('moved_at', sa.Float(), nullable=False),
    )
    op.create_table(
        'dataset_alias_moves',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('dataset_id', sa.Integer(), sa.ForeignKey('datasets.id', ondelete='CASCADE'), nullable=False),
        sa.Column('alias', sa.String(length=64), nullable=False),
        sa.Column('from_version', sa.Integer(), nullable=True),
        sa.Column('to_version', sa.Integer(), nullable=True),
        sa.Column('moved_by', sa.String(length=160), nullable=False),
        sa.Column('at', sa.Float(), nullable=False),
    )
    op.create_index('ix_dataset_alias_moves_dataset', 'dataset_alias_moves', ['dataset_id', 'alias'])
    op.create_table(
        'blob_uploaders',
        sa.Column('digest', sa.String(length=64), primary_key=True),
        sa.Column('user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('size', sa.BigInteger(), nullable=False),
        sa.Column('uploaded_at', sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('blob_uploaders')
    op.drop_table('dataset_alias_moves')
    op.drop_table('dataset_aliases')
    op.drop_index('ix_dataset_files_digest', table_name='dataset_files')
    op.drop_table('dataset_files')
    op.drop_table('dataset_versions')
    op.drop_table('datasets')
