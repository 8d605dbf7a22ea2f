"""The replay report's plots over time: long runs are averaged over bins, short ones kept."""

from __future__ import annotations

import pytest

from tools.fauxmaster.report import binned_means


@pytest.mark.parametrize("n, max_points, sizes", [
    (5, 10, [1] * 5), (10, 10, [1] * 10), (11, 10, [2] * 5 + [1]), (2500, 1000, [3] * 833 + [1]),
], ids=["fewer", "exactly", "one-more", "long"])
def test_binned_means_average_consecutive_samples(n, max_points, sizes):
    t = [float(i) for i in range(n)]
    values = [float(i * i) for i in range(n)]
    bt, (bv,) = binned_means(t, [values], max_points)
    assert len(bt) == len(sizes) <= max_points
    start = 0
    for i, size in enumerate(sizes):
        assert bt[i] == pytest.approx(sum(t[start:start + size]) / size)
        assert bv[i] == pytest.approx(sum(values[start:start + size]) / size)
        start += size


def test_binned_means_of_nothing():
    assert binned_means([], [[], []]) == ([], [[], []])
