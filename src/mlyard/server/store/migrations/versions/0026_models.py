"""models: the model registry's models, immutable versions (files over the content-addressed
store, format, metrics, lineage), aliases and their moves

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'models',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('project', sa.String(length=63), sa.ForeignKey('projects.name'), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('owner_id', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('tags', sa.JSON(), nullable=False),
        sa.Column('task', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.UniqueConstraint('project', 'name', name='uq_models_project_name'),
    )
    op.create_table(
        'model_versions',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('model_id', sa.Integer(), sa.ForeignKey('models.id', ondelete='CASCADE'), nullable=False),
        sa.Column('number', sa.Integer(), nullable=False),
        sa.Column('format', sa.String(length=32), nullable=False),
        sa.Column('framework_version', sa.String(length=64), nullable=False),
        sa.Column('signature', sa.JSON(), nullable=True),
        sa.Column('metrics', sa.JSON(), nullable=False),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('created_by', sa.Integer(), sa.ForeignKey('users.id'), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('file_count', sa.Integer(), nullable=False),
        sa.Column('total_bytes', sa.BigInteger(), nullable=False),
        sa.Column('statistics', sa.JSON(), nullable=False),
        sa.Column('job_id', sa.Integer(), sa.ForeignKey('jobs.id'), nullable=True),
        sa.Column('attempt', sa.Integer(), nullable=True),
        sa.Column('snapshot', sa.String(length=64), nullable=True),
        sa.Column('datasets', sa.JSON(), nullable=False),
        sa.Column('parent_id', sa.Integer(), sa.ForeignKey('model_versions.id'), nullable=True),
        sa.UniqueConstraint('model_id', 'number', name='uq_model_versions_number'),
    )
    op.create_index('ix_model_versions_parent', 'model_versions', ['parent_id'])
    op.create_table(
        'model_files',
        sa.Column('version_id', sa.Integer(), sa.ForeignKey('model_versions.id', ondelete='CASCADE'),
                  primary_key=True),
        sa.Column('path', sa.String(length=1024), primary_key=True),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('size', sa.BigInteger(), nullable=False),
        sa.Column('media_type', sa.String(length=128), nullable=True),
    )
    op.create_index('ix_model_files_digest', 'model_files', ['digest'])
    op.create_table(
        'model_aliases',
        sa.Column('model_id', sa.Integer(), sa.ForeignKey('models.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('name', sa.String(length=64), primary_key=True),
        sa.Column('version_id', sa.Integer(), sa.ForeignKey('model_versions.id'), nullable=False),
        sa.Column('moved_at', sa.Float(), nullable=False),
    )
    op.create_table(
        'model_alias_moves',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('model_id', sa.Integer(), sa.ForeignKey('models.id', ondelete='CASCADE'), nullable=False),
        sa.Column('alias', sa.String(length=64), nullable=False),
        sa.Column('from_version', sa.Integer(), nullable=True),
        sa.Column('to_version', sa.Integer(), nullable=True),
        sa.Column('moved_by', sa.String(length=160), nullable=False),
        sa.Column('at', sa.Float(), nullable=False),
    )
    op.create_index('ix_model_alias_moves_model', 'model_alias_moves', ['model_id', 'alias'])


def downgrade() -> None:
    op.drop_index('ix_model_alias_moves_model', table_name='model_alias_moves')
    op.drop_table('model_alias_moves')
    op.drop_table('model_aliases')
    op.drop_index('ix_model_files_digest', table_name='model_files')
    op.drop_table('model_files')
    op.drop_index('ix_model_versions_parent', table_name='model_versions')
    op.drop_table('model_versions')
    op.drop_table('models')
