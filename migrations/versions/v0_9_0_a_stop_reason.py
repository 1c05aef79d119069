"""Why a job's search stopped: one sentence with numbers ("nothing left can win: ...", "trial
budget spent ..."), written when the search closes (no worker then takes another trial slot)
and completed with the confirmation's outcome when the job ends. And the offline prices the
search used (``offline_prices``: every proposer's predicted acceptance per depth, and why
some are unpriced), so the report shows them for proposers never launched too.

Revision ID: v0.9.0.a
Revises: v0.8.0.a
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.9.0.a"
down_revision = "v0.8.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spectune_jobs") as b:
        b.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
        b.add_column(sa.Column("offline_prices", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spectune_jobs") as b:
        b.drop_column("offline_prices")
        b.drop_column("stop_reason")
