"""API bearer tokens, stored as SHA-256 digests.

Revision ID: v0.5.0.a
Revises: v0.4.0.a
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.5.0.a"
down_revision = "v0.4.0.a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spectune_api_tokens",
        sa.Column("token_id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("spectune_api_tokens")
