"""Measurement columns: lossless guard, memory, confirmation launches.

Revision ID: v0.3.0.a
Revises: v0.2.0.a
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.3.0.a"
down_revision = "v0.2.0.a"
branch_labels = None
depends_on = None

_TRIAL_COLS = ("lossless_match_rate", "greedy_token_ids", "kv_cache_tokens", "peak_rss_mb")


def upgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.add_column(sa.Column("lossless_match_rate", sa.Float(), nullable=True))
        b.add_column(sa.Column("greedy_token_ids", sa.JSON(), nullable=True))
        b.add_column(sa.Column("kv_cache_tokens", sa.Integer(), nullable=True))
        b.add_column(sa.Column("peak_rss_mb", sa.Float(), nullable=True))
    with op.batch_alter_table("spectune_jobs") as b:
        b.add_column(
            sa.Column("confirm_launches", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("spectune_jobs") as b:
        b.drop_column("confirm_launches")
    with op.batch_alter_table("spectune_trials") as b:
        for col in reversed(_TRIAL_COLS):
            b.drop_column(col)
