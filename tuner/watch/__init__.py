"""Watch a deployed server against the job that chose its configuration: live acceptance
from the server's own counters, job N's predictions at that acceptance and concurrency, and
a verdict ("still pays", "switch to k=...", "turn speculation off", "cannot tell yet")."""

from tuner.watch._assess import LEAD, assess
from tuner.watch._compare import NOT_COMPARED, compare_server
from tuner.watch._model import LevelModel, WatchedJob, load_job_model
from tuner.watch._poller import WatchPoller
from tuner.watch._result import (
    CANNOT_TELL,
    STILL_PAYS,
    SWITCH,
    TURN_OFF,
    VERDICT_CODES,
    DepthPrediction,
    JobAcceptance,
    WatchResult,
)
from tuner.watch._run import Scraper, check_url, next_window
from tuner.watch._window import MIN_DRAFTS, Window, window_of

__all__ = [
    "CANNOT_TELL",
    "LEAD",
    "MIN_DRAFTS",
    "NOT_COMPARED",
    "STILL_PAYS",
    "SWITCH",
    "TURN_OFF",
    "VERDICT_CODES",
    "DepthPrediction",
    "JobAcceptance",
    "WatchedJob",
    "LevelModel",
    "Scraper",
    "WatchPoller",
    "WatchResult",
    "Window",
    "assess",
    "check_url",
    "compare_server",
    "load_job_model",
    "next_window",
    "window_of",
]
