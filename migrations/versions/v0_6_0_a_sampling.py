"""Lossless under sampling: the distribution check's sampled continuations of each trial
and a candidate's p-value against the baseline's.

Revision ID: v0.6.0.a
Revises: v0.5.0.c
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.6.0.a"
down_revision = "v0.5.0.c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.add_column(sa.Column("sampled_token_ids", sa.JSON(), nullable=True))
        b.add_column(sa.Column("lossless_p_value", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.drop_column("lossless_p_value")
        b.drop_column("sampled_token_ids")
