"""Cost metrics (issue 36): percentile bootstrap CIs against scipy, the summary of latencies,
the ranking cache carrying the latency it was measured with."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from pipeline.stats.percentile import percentiles_with_ci


@pytest.mark.parametrize("q", [50.0, 95.0, 99.0])
def test_percentile_ci_equals_scipy_bootstrap(q):
    x = np.random.default_rng(3).lognormal(1.0, 0.5, 257)
    ours = percentiles_with_ci(x, [q], n_resamples=999, seed=11)[q]
    theirs = scipy.stats.bootstrap((x,), lambda s, axis: np.percentile(s, q, axis=axis), n_resamples=999,
                                   method="percentile", rng=np.random.default_rng(11), vectorized=True)
    assert ours[0] == pytest.approx(np.percentile(x, q), rel=1e-12)
    assert ours[1] == pytest.approx(theirs.confidence_interval.low, rel=1e-12)
    assert ours[2] == pytest.approx(theirs.confidence_interval.high, rel=1e-12)


def test_equal_values_have_a_point_interval():
    assert percentiles_with_ci(np.full(40, 2.5), [50, 95]) == {50.0: (2.5, 2.5, 2.5), 95.0: (2.5, 2.5, 2.5)}
    with pytest.raises(ValueError):
        percentiles_with_ci([], [50])
