"""Many workers on one job: the shared trial budget and who ran each trial.

Revision ID: v0.5.0.b
Revises: v0.5.0.a
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.5.0.b"
down_revision = "v0.5.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spectune_jobs") as b:
        b.add_column(sa.Column("trials_started", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("spectune_trials") as b:
        b.add_column(sa.Column("worker_id", sa.String(200), nullable=True))
        b.add_column(sa.Column("devices", sa.String(100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.drop_column("devices")
        b.drop_column("worker_id")
    with op.batch_alter_table("spectune_jobs") as b:
        b.drop_column("trials_started")
