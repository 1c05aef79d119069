"""The launch-to-launch noise a job's confirmations reveal, said next to the winner.

The numbers are typed in from two back-to-back launches of one n-gram configuration on the
2-core CPU machine (1055.9 then 568.7 tok/s, each with a tight interval over 5 repeats); no
engine runs here."""

from __future__ import annotations

from typing import Any

from tuner.explain import relaunch_spread
from tuner.pareto import Point


def _point(number: int, new: float, old: float | None, half: float, conc: int = 4) -> Point:
    m: dict[str, Any] = {
        "concurrency": conc,
        "output_tok_per_s": new,
        "stats": {"output_tok_per_s": {"ci95_low": new - half, "ci95_high": new + half}},
    }
    if old is not None:
        m.update(confirmed=True, search={"output_tok_per_s": old})
    return Point(number, "ngram", {}, {}, m, True, ())


def test_nothing_launched_twice_says_nothing():
    assert relaunch_spread([_point(1, 1000.0, None, 50.0)], "output_tok_per_s") is None


def test_a_relaunch_beyond_the_intervals_says_differences_under_it_are_unproven():
    pts = [
        _point(2, 568.7, 1055.9, 22.8),  # the slower second launch, +/-4% within it
        _point(0, 479.7, 383.9, 20.0),
        _point(5, 700.0, None, 30.0),  # launched once: not a relaunch
    ]
    text = relaunch_spread(pts, "output_tok_per_s")
    assert text is not None
    assert "trials 0, 2" in text and "-46% to +25%" in text
    assert "largest: trial 2 at concurrency 4" in text
    assert "more than the 95% intervals (median +/-4%)" in text
    assert "a difference under 46% is not proven" in text


def test_a_relaunch_inside_the_intervals_says_they_held():
    text = relaunch_spread([_point(3, 1010.0, 1000.0, 50.0)], "output_tok_per_s")
    assert text is not None and "+1% to +1%" in text
    assert "within the 95% intervals of one launch, so those intervals held" in text


def test_a_relaunch_with_no_stored_search_number_is_skipped():
    p = _point(4, 900.0, None, 10.0)
    p.metrics.update(confirmed=True, search={})
    assert relaunch_spread([p], "output_tok_per_s") is None
