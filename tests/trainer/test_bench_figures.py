"""The benchmarks' spread of a ratio: an interval of the median from order statistics, and a claim
of "faster" only where the whole interval lies above 1 (benchmarks/figures.py)."""

from __future__ import annotations

import math

import pytest

from benchmarks.figures import median_interval, verdict


@pytest.mark.parametrize(
    ("rounds", "low_rank", "coverage"),
    [
        (5, 1, 1 - 2 / 32),  # only the smallest and largest of five reach 90 %
        (7, 1, 1 - 2 / 128),  # the second and sixth cover 1 - 2 * 8 / 128 = 87.5 %
        (10, 2, 1 - 2 * 11 / 1024),  # the third and eighth cover 89.1 %
        (25, 8, 1 - 2 * sum(math.comb(25, i) for i in range(8)) / 2**25),
    ],
)
def test_the_interval_is_the_narrowest_pair_of_order_statistics_covering_90_percent(
    rounds: int, low_rank: int, coverage: float
) -> None:
    values = [float(v) for v in range(rounds, 0, -1)]  # any order: the function sorts
    low, high, level = median_interval(values)
    assert (low, high) == (float(low_rank), float(rounds + 1 - low_rank))
    assert level == pytest.approx(coverage) and level >= 0.9


def test_faster_only_where_the_interval_lies_above_one() -> None:
    assert verdict(*median_interval([1.21, 1.25, 1.3, 1.22, 1.27]), "faster", "slower") == "faster"
    assert verdict(*median_interval([0.8, 0.9, 0.85, 0.95, 0.9]), "faster", "slower") == "slower"
    # A median above 1 is no claim when one round says otherwise.
    one_below = verdict(*median_interval([1.3, 1.25, 0.98, 1.28, 1.26]), "faster", "slower")
    assert one_below == "not distinguishable: the interval holds 1"
    # Four rounds cannot hold the median with 90 %: 1 - 2 / 16 = 87.5 %.
    assert verdict(*median_interval([1.3, 1.3, 1.3, 1.3]), "faster", "slower").startswith("too few rounds")
