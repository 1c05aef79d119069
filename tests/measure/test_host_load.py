"""Other load on the host during a point's repeats (``tuner.measure._host``): the machine's
busy CPU time less the engine's and our own, as a share of the machine; a point above
``measurement.max_host_load`` is flagged disturbed, with the reason in its violations."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tuner.launches import launch_record, noise_reason
from tuner.measure._host import HostLoad
from tuner.space import MeasurementSpec


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_others_share_is_busy_time_less_the_engines_and_ours():
    """Two cores for 10 s: 20 CPU-seconds. The host was busy 15 s of them, the engine 9 and
    the load generator 2: the others took 4, a fifth of the machine."""
    clock, busy, eng, own = _Clock(), [100.0], [50.0], [7.0]
    h = HostLoad(lambda: eng[0], lambda: busy[0], lambda: own[0], cores=2, clock=clock)
    clock.t, busy[0], eng[0], own[0] = 10.0, 115.0, 59.0, 9.0
    assert h.other_share() == pytest.approx(0.2)


def test_nothing_is_judged_without_the_engines_own_time():
    assert HostLoad(None).other_share() is None  # a hosted endpoint
    gone = HostLoad(lambda: None, cores=2)  # a server that cannot say
    assert gone.other_share() is None
    quiet = HostLoad(lambda: 0.0, lambda: 5.0, lambda: 1.0, cores=2, clock=_Clock())
    assert quiet.other_share() is None  # no time passed


def test_a_cpu_hog_beside_the_engine_is_seen():
    """Real processes: one busy loop per core for 1.5 s, no engine: most of the machine."""
    n = psutil.cpu_count() or 1
    h = HostLoad(lambda: 0.0)
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"]
        )
        for _ in range(n)
    ]
    for p in hogs:
        p.wait(timeout=30)
    time.sleep(0.1)
    share = h.other_share()
    assert share is not None and share > 0.5, share


def test_a_disturbed_point_says_why_and_its_launch_is_disturbed():
    m = {"noisy": True, "host_disturbed": True, "host_other_cpu_share": 0.46, "relative_mad": 0.02}
    assert noise_reason(m) == "noisy: other processes used 46% of the host's CPU"
    assert noise_reason({"noisy": True, "relative_mad": 0.2}) == "noisy: relative MAD 20%"
    assert launch_record(m, confirm=False)["disturbed"] is True
    with pytest.raises(ValueError, match="max_host_load"):
        MeasurementSpec(max_host_load=1.5)
