"""One list of job states (``tuner.states``): the API's enum and the web UI's ``ENDED`` (a
JS copy, so it is read from the file) say the same as it."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

from tuner.api.schemas import JobState as ApiJobState
from tuner.states import JOB_ENDED, JobState

WEB = Path(__file__).resolve().parents[2] / "web"


def test_the_web_uis_ended_list_is_the_job_ended_states():
    m = re.search(r"^export const ENDED = (\[.*?\]);$", (WEB / "util.js").read_text(), re.M)
    assert m, "web/util.js no longer declares ENDED on one line"
    ended = ast.literal_eval(m.group(1))
    assert len(ended) == len(set(ended)) and set(ended) == {s.value for s in JOB_ENDED}


def test_the_api_enum_is_every_job_state_in_order():
    assert list(get_args(ApiJobState)) == [s.value for s in JobState]
