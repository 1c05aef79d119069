"""Initial schema: spectune_jobs, spectune_trials, spectune_measurements.

Revision ID: v0.1.0.a
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "v0.1.0.a"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spectune_jobs",
        sa.Column("job_id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("study_name", sa.String(200), nullable=False, unique=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("space", sa.JSON(), nullable=False),
        sa.Column("space_yaml", sa.Text(), nullable=True),
        sa.Column("n_trials", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("engine_launches", sa.Integer(), nullable=False),
        sa.Column("engine_startup_s", sa.Float(), nullable=False),
    )
    op.create_table(
        "spectune_trials",
        sa.Column("trial_id", sa.Integer(), primary_key=True),
        sa.Column(
            "job_id",
            sa.Integer(),
            sa.ForeignKey("spectune_jobs.job_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("method", sa.String(40), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("engine_config", sa.JSON(), nullable=False),
        sa.Column("engine_key", sa.String(32), nullable=False),
        sa.Column("fail_reason", sa.String(40), nullable=True),
        sa.Column("fail_detail", sa.Text(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("startup_s", sa.Float(), nullable=True),
        sa.Column("reused_from", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("job_id", "number"),
    )
    op.create_table(
        "spectune_measurements",
        sa.Column("measurement_id", sa.Integer(), primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("spectune_trials.trial_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("workload", sa.String(100), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("output_tok_per_s", sa.Float(), nullable=False),
        sa.Column("p99_tpot_ms", sa.Float(), nullable=True),
        sa.Column("num_failed", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("trial_id", "workload", "concurrency"),
    )


def downgrade() -> None:
    op.drop_table("spectune_measurements")
    op.drop_table("spectune_trials")
    op.drop_table("spectune_jobs")
