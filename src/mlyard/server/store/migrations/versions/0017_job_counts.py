"""job counts: how many jobs each (status, project, queue) holds, kept by triggers, so that a
listing's total is read from a few rows instead of counted over every unfinished job

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None

_COLUMNS = "status, project, queue, n"

# SQLite has row triggers only. On PostgreSQL an insert or a delete adds one row per group of
# the statement, from its transition table (a batch of 1,000 jobs adds one row, not 1,000).
_SQLITE = (
    f"""CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN
        INSERT INTO job_counts ({_COLUMNS}) VALUES (NEW.status, NEW.project, NEW.queue, 1); END""",
    f"""CREATE TRIGGER job_counts_update AFTER UPDATE OF status, project, queue ON jobs
        WHEN OLD.status IS NOT NEW.status OR OLD.project IS NOT NEW.project OR OLD.queue IS NOT NEW.queue BEGIN
        INSERT INTO job_counts ({_COLUMNS}) VALUES (OLD.status, OLD.project, OLD.queue, -1);
        INSERT INTO job_counts ({_COLUMNS}) VALUES (NEW.status, NEW.project, NEW.queue, 1); END""",
    f"""CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN
        INSERT INTO job_counts ({_COLUMNS}) VALUES (OLD.status, OLD.project, OLD.queue, -1); END""",
)
_POSTGRES = (
    f"""CREATE FUNCTION job_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO job_counts ({_COLUMNS})
            SELECT status, project, queue, count(*) FROM new_rows GROUP BY status, project, queue;
        RETURN NULL; END $$""",
    f"""CREATE FUNCTION job_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO job_counts ({_COLUMNS}) VALUES (OLD.status, OLD.project, OLD.queue, -1),
                                                 (NEW.status, NEW.project, NEW.queue, 1);
        RETURN NULL; END $$""",
    f"""CREATE FUNCTION job_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO job_counts ({_COLUMNS})
            SELECT status, project, queue, -count(*) FROM old_rows GROUP BY status, project, queue;
        RETURN NULL; END $$""",
    """CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION job_counts_insert()""",
    # Per row, for the rows whose status, project or queue changed only: an update of anything
    # else (a waiting reason, a revision) never calls the function. (PostgreSQL refuses
    # transition tables on a trigger with a column list.)
    """CREATE TRIGGER job_counts_update AFTER UPDATE OF status, project, queue ON jobs FOR EACH ROW
        WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.project IS DISTINCT FROM NEW.project
              OR OLD.queue IS DISTINCT FROM NEW.queue)
        EXECUTE FUNCTION job_counts_update()""",
    """CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION job_counts_delete()""",
)


def upgrade() -> None:
    op.create_table(
        'job_counts',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), primary_key=True, autoincrement=True),
        sa.Column('status', sa.String(16), nullable=False),
        sa.Column('project', sa.String(63), nullable=False),
        sa.Column('queue', sa.String(63), nullable=False),
        sa.Column('n', sa.BigInteger(), nullable=False),
    )
    op.create_index('ix_job_counts_status', 'job_counts', ['status', 'project', 'queue'])
    op.execute(f"INSERT INTO job_counts ({_COLUMNS}) "
               "SELECT status, project, queue, count(*) FROM jobs GROUP BY status, project, queue")
    for statement in (_POSTGRES if op.get_bind().dialect.name == 'postgresql' else _SQLITE):
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == 'postgresql'
    for name in ('job_counts_insert', 'job_counts_update', 'job_counts_delete'):
        op.execute(f"DROP TRIGGER {name} ON jobs" if postgres else f"DROP TRIGGER {name}")
        if postgres:
            op.execute(f"DROP FUNCTION {name}()")
    op.drop_index('ix_job_counts_status', table_name='job_counts')
    op.drop_table('job_counts')
