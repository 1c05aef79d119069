"""The structure-aware search: how each trial was proposed, what was predicted for it, and
which class member it was launched as.

Revision ID: v0.5.0.c
Revises: v0.5.0.b
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.5.0.c"
down_revision = "v0.5.0.b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.add_column(sa.Column("search", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spectune_trials") as b:
        b.drop_column("search")
