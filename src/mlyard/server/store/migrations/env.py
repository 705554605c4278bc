"""Alembic environment: the server passes its open connection in `config.attributes`."""

from alembic import context

from mlyard.server.store.rows import Base

connection = context.config.attributes.get("connection")
if connection is None:  # `alembic` run by hand: use MLYARD_DATABASE_URL or the default home
    from mlyard.server.store.db import make_engine
    from mlyard.server.settings import ServerSettings

    engine = make_engine(ServerSettings.from_environment().effective_database_url)
    with engine.begin() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
