"""Alembic environment for SpecTune's own tables (Optuna's are left alone)."""

from alembic import context
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tuner.storage import Base

config = context.config
VERSION_TABLE = config.attributes.get("version_table", "spectune_alembic_version")
OWN_TABLES = set(Base.metadata.tables)
# PostgreSQL advisory lock id ("SPECTUNE" in ASCII): one migration at a time per database.
MIGRATION_LOCK = 0x5350454354554E45


def _include(obj: object, name: str, type_: str, reflected: bool, compare_to: object) -> bool:
    # Autogenerate must never propose dropping Optuna's tables.
    return not (type_ == "table" and name not in OWN_TABLES)


def run() -> None:
    url = config.get_main_option("sqlalchemy.url")
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        context.configure(
            connection=conn,
            target_metadata=Base.metadata,
            version_table=VERSION_TABLE,
            render_as_batch=url.startswith("sqlite"),
            include_object=_include,
        )
        with context.begin_transaction():
            if conn.dialect.name == "postgresql":
                # A service and its workers starting on a new database all migrate it: the
                # later ones wait here, then read the version table the first one wrote and
                # find nothing to do (PostgreSQL runs the DDL in this same transaction).
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
            context.run_migrations()
    engine.dispose()


run()
