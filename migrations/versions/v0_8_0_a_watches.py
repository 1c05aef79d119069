"""Watches: deployed servers scraped against the job that chose their configuration, with
the latest window's verdict and answer.

Revision ID: v0.8.0.a
Revises: v0.7.0.a
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.8.0.a"
down_revision = "v0.7.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spectune_watches",
        sa.Column("watch_id", sa.Integer(), primary_key=True),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("spectune_jobs.job_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("interval_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=True),
        sa.Column("checked_at", sa.DateTime(), nullable=True),
        sa.Column("verdict", sa.String(60), nullable=True),
        sa.Column("last_result", sa.JSON(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("spectune_watches")
