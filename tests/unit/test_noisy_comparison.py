"""The statistics a gate's capacity rounds are judged with, against their definitions."""

import math
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from dd_accept.base.noisy_comparison import judge_rounds, mann_whitney_p, ratio_interval

samples = st.lists(st.floats(min_value=1.0, max_value=1e4, allow_nan=False), min_size=1, max_size=5)


def test_the_exact_rank_test_matches_its_table():
    # every candidate run above every baseline run: the one split of C(2n, n) that extreme
    assert mann_whitney_p([4, 5, 6], [1, 2, 3]) == 1 / 20
    assert mann_whitney_p([5, 6, 7, 8], [1, 2, 3, 4]) == 1 / 70
    assert mann_whitney_p([3, 5, 6], [1, 2, 4]) == 2 / 20  # one pair out of order: U = 8 of 9
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == 1.0  # better, never "greater"


@given(samples, samples)
def test_the_rank_test_is_a_probability_that_only_the_order_decides(worse, other):
    p = mann_whitney_p(worse, other)
    assert 1 / math.comb(len(worse) + len(other), len(worse)) - 1e-12 <= p <= 1.0
    assert mann_whitney_p([v * 3 + 1 for v in worse], [v * 3 + 1 for v in other]) == p  # ranks, not values


@settings(deadline=None, max_examples=40)  # 4,000 resamples an example: its time is the machine's, not a bug
@given(samples, samples, st.floats(min_value=0.01, max_value=100))
def test_the_ratio_interval_holds_the_ratio_and_does_not_depend_on_the_unit(baseline, candidate, unit):
    interval = ratio_interval(baseline, candidate)
    assert interval is not None and interval.low <= interval.high
    assert math.isclose(interval.ratio, statistics.median(candidate) / statistics.median(baseline))
    scaled = ratio_interval([v * unit for v in baseline], [v * unit for v in candidate])
    assert math.isclose(scaled.low, interval.low, rel_tol=1e-9) and math.isclose(
        scaled.high, interval.high, rel_tol=1e-9
    )


def test_a_proxy_twice_as_costly_is_worse_and_the_machines_noise_is_not():
    """rc1's CPU per chunk on one day ran 30.4-46.6 us (docs/benchmarks.md): three runs of it
    against three of itself are not a regression; a proxy paying twice that is, on the same
    spread, with the numbers that say so."""
    rc1 = [30.4, 36.2, 46.6]
    again = judge_rounds(rc1, [32.6, 46.1, 29.8], "higher", 0.25)
    assert not again.worse and again.p > 0.05, again
    doubled = judge_rounds(rc1, [2 * v for v in [32.6, 46.1, 29.8]], "higher", 0.25)
    assert doubled.worse and doubled.p == 1 / 20 and doubled.interval.low > 1 and doubled.interval.ratio > 1.25
    # overlapping runs: the rank test does not separate them, whatever the medians say
    overlap = judge_rounds(rc1, [40.0, 70.0, 88.0], "higher", 0.25)
    assert not overlap.worse and overlap.p == 2 / 20 and overlap.interval.ratio > 1.9, overlap


def test_a_knee_a_half_lower_is_worse_and_a_better_one_never_is():
    knees = [20_508.0, 25_000.0, 29_558.0]
    assert judge_rounds(knees, [9_000.0, 10_000.0, 12_000.0], "lower", 0.2).worse
    # halved, on the spread rc1's knee has across runs (14,074-30,469): the interval need only
    # clear half the smallest change (x0.85 here), the ratio the whole of it (x0.55)
    spread = [30_469.0, 20_000.0, 14_074.0]
    halved = judge_rounds(spread, [12_000.0, 11_000.0, 10_000.0], "lower", 0.2)
    assert halved.worse and halved.interval.high < 0.9 and halved.interval.ratio < 0.8, halved
    # but one candidate run inside the baseline's range (13,500 of 14,074) is not shown at 3 rounds
    assert not judge_rounds(spread, [13_500.0, 12_500.0, 11_000.0], "lower", 0.2).worse
    assert not judge_rounds(knees, [40_000.0, 45_000.0, 50_000.0], "lower", 0.2).worse
    # wholly lower, but by less than the smallest change that counts: not a regression
    assert not judge_rounds(knees, [v * 0.9 for v in knees], "lower", 0.2).worse


def test_fewer_than_three_runs_a_side_never_show_a_regression():
    verdict = judge_rounds([30.0, 31.0], [90.0, 91.0], "higher", 0.25)
    assert not verdict.worse and verdict.p == 1 / 6


def test_a_shift_inside_the_margin_is_never_worse_and_a_ratio_to_nothing_is_no_verdict():
    """A light chunk's delay near the clock's resolution: 0.1 -> 0.3 ms is x3, inside 0.5 ms."""
    small = judge_rounds([0.1, 0.1, 0.1], [0.3, 0.3, 0.3], "higher", 0.5, margin=0.5)
    assert not small.worse and math.isclose(small.interval.ratio, 3.0)
    assert judge_rounds([0.1, 0.1, 0.1], [0.9, 0.9, 0.9], "higher", 0.5, margin=0.5).worse
    assert judge_rounds([0.0] * 3, [5.0] * 3, "higher", 0.5).interval is None
