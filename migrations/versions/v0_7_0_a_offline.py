"""Offline acceptance: the baseline's prompt and greedy output token ids of the workload,
from which every proposer is priced before its launch.

Revision ID: v0.7.0.a
Revises: v0.6.0.a
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.7.0.a"
down_revision = "v0.6.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.add_column(sa.Column("token_sequences", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.drop_column("token_sequences")
