"""Hosted endpoints measured as reference rows.

Revision ID: v0.4.0.a
Revises: v0.3.0.a
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.4.0.a"
down_revision = "v0.3.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spectune_references",
        sa.Column("reference_id", sa.Integer(), primary_key=True),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("spectune_jobs.job_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("model", sa.String(500), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("measurements", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("job_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("spectune_references")
