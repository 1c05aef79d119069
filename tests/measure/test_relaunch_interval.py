"""The launch-aware interval (issue 21): a 95 % prediction interval for one more launch,
taken on the log scale, checked on fixed numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from tuner.stats import relaunch_interval


def test_three_launches_ten_percent_apart():
    # logs: ln 110 -/+ ln 1.1, so mean ln 110 and s = ln 1.1; n = 3, t(0.975, 2) = 4.303
    lo, hi = relaunch_interval([100.0, 110.0, 121.0])
    half = 4.303 * math.log(1.1) * math.sqrt(1 + 1 / 3)
    assert lo == pytest.approx(110.0 * math.exp(-half))
    assert hi == pytest.approx(110.0 * math.exp(half))
    assert (lo, hi) == pytest.approx((68.51, 176.63), abs=0.01)
    assert lo * hi == pytest.approx(110.0**2)  # symmetric on the log scale


def test_more_launches_narrow_it_and_equal_launches_give_a_point():
    five = relaunch_interval([100.0, 110.0, 121.0, 100.0, 121.0])
    three = relaunch_interval([100.0, 110.0, 121.0])
    assert three[0] < five[0] < five[1] < three[1]
    assert relaunch_interval([50.0, 50.0]) == pytest.approx((50.0, 50.0))


def test_two_launches_use_one_degree_of_freedom():
    lo, hi = relaunch_interval([100.0, 200.0])
    s = math.log(2) / math.sqrt(2)  # stdev of two logs ln 2 apart
    half = 12.706 * s * math.sqrt(1.5)
    assert (lo, hi) == pytest.approx(
        (math.sqrt(2e4) * math.exp(-half), math.sqrt(2e4) * math.exp(half))
    )


@pytest.mark.parametrize("values", [[], [100.0], [100.0, 0.0], [100.0, -5.0]])
def test_refuses_what_has_no_interval(values):
    with pytest.raises(ValueError):
        relaunch_interval(values)
