"""Service columns on spectune_jobs: worker claim, heartbeat, cancel request, idempotency.

Revision ID: v0.2.0.a
Revises: v0.1.0.a
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.2.0.a"
down_revision = "v0.1.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot ALTER a table in place; Alembic copies it.
    with op.batch_alter_table("spectune_jobs") as b:
        b.add_column(
            sa.Column("for_worker", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        b.add_column(sa.Column("idempotency_key", sa.String(200), nullable=True))
        b.add_column(sa.Column("request_sha256", sa.String(64), nullable=True))
        b.add_column(sa.Column("claimed_by", sa.String(200), nullable=True))
        b.add_column(sa.Column("heartbeat_at", sa.DateTime(), nullable=True))
        b.add_column(
            sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        b.create_unique_constraint("uq_spectune_jobs_idempotency_key", ["idempotency_key"])
        b.create_index("ix_spectune_jobs_state", ["state"])


def downgrade() -> None:
    with op.batch_alter_table("spectune_jobs") as b:
        b.drop_index("ix_spectune_jobs_state")
        b.drop_constraint("uq_spectune_jobs_idempotency_key", type_="unique")
        for col in (
            "cancel_requested",
            "heartbeat_at",
            "claimed_by",
            "request_sha256",
            "idempotency_key",
            "for_worker",
        ):
            b.drop_column(col)
