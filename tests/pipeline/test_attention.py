"""Attention curves (pipeline/context/attention.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.context import attention

CONF = Path(__file__).resolve().parents[2] / "conf"
CURVES = {
    "liu2023": attention.liu2023,
    "flat": attention.flat,
    "log": attention.log,
    "u_shape": attention.u_shape,
}


def test_liu2023_at_20_gives_the_papers_accuracies():
    # Liu et al. 2023, GPT-3.5-Turbo, 20 documents: 75.8 / 53.8 / 63.2 % at positions 1 / 10 /
    # 20 (quoted in docs/metrics.md, "Context placement"), 57.2 / 55.4 % at 5 / 15. Raw fractions,
    # not normalised.
    w = attention.liu2023(20)
    assert w.shape == (20,)
    assert w[0] == pytest.approx(0.758, abs=1e-12)
    assert w[9] == pytest.approx(0.538, abs=1e-12)
    assert w[19] == pytest.approx(0.632, abs=1e-12)
    assert w[4] == pytest.approx(0.572, abs=1e-12)
    assert w[14] == pytest.approx(0.554, abs=1e-12)
    # Between measured positions: linear. Position 2 lies 1/4 of the way from 1 to 5.
    assert w[1] == pytest.approx(0.758 + (0.572 - 0.758) / 4, abs=1e-12)
    # Position 12 lies 2/5 of the way from 10 to 15.
    assert w[11] == pytest.approx(0.538 + (0.554 - 0.538) * 2 / 5, abs=1e-12)


def test_liu2023_stretched_over_k_slots():
    # k = 1: the single slot is position 1.
    np.testing.assert_allclose(attention.liu2023(1), [0.758])
    # k = 2: positions 1 and 20.
    np.testing.assert_allclose(attention.liu2023(2), [0.758, 0.632])
    # k = 39: slot i is position 1 + (i - 1) / 2; slot 2 -> position 1.5, 1/8 of the way to 5.
    w = attention.liu2023(39)
    assert w[1] == pytest.approx(0.758 - 0.186 / 8, abs=1e-12)
    assert w[18] == pytest.approx(0.538, abs=1e-12)  # slot 19 -> position 10
    # U-shaped for every k >= 3: the middle is below both ends, the first slot is the best.
    for k in range(3, 60):
        w = attention.liu2023(k)
        assert w.argmax() == 0
        assert w[(k - 1) // 2] < w[-1] < w[0]


def test_flat_and_log_values():
    np.testing.assert_array_equal(attention.flat(4), [1.0, 1.0, 1.0, 1.0])
    # 1 / log2(i + 1): 1, 1/log2 3 = 0.6309..., 1/2, 1/log2 5 = 0.4306...
    np.testing.assert_allclose(attention.log(4), [1.0, 0.63092975357, 0.5, 0.43067655807], rtol=1e-10)
    assert attention.log(1).tolist() == [1.0]


def test_u_shape_values_by_hand():
    # Defaults start 1, end .85, floor .7, power 2, center .5; k = 5 -> x = 0, .25, .5, .75, 1:
    #   x=0: 1;  x=.25: .7 + .3 * (.25/.5)^2 = .775;  x=.5: .7;
    #   x=.75: .7 + .15 * (.25/.5)^2 = .7375;  x=1: .85
    np.testing.assert_allclose(attention.u_shape(5), [1.0, 0.775, 0.7, 0.7375, 0.85], rtol=1e-12)
    # power 1, center .25, k = 5: x=.25 is the floor; x=.5: .5 + (2 - .5) * (.25/.75) = 1.
    got = attention.u_shape(5, start=3.0, end=2.0, floor=0.5, power=1.0, center=0.25)
    np.testing.assert_allclose(got, [3.0, 0.5, 1.0, 1.5, 2.0], rtol=1e-12)
    assert attention.u_shape(1).tolist() == [1.0]


def test_u_shape_for_large_k():
    k = 101
    w = attention.u_shape(k)
    assert w[0] == pytest.approx(1.0) and w[-1] == pytest.approx(0.85)
    assert w[50] == pytest.approx(0.7)  # slot 51 sits on center = .5: the floor
    assert w[50] == w.min()
    assert np.all(w[40:61] < min(w[0], w[-1]))
    assert np.all(np.diff(w[:51]) < 0) and np.all(np.diff(w[50:]) > 0)


@given(
    st.integers(1, 200),
    st.floats(0.01, 1.0),
    st.floats(0.0, 2.0),
    st.floats(0.0, 2.0),
    st.floats(0.2, 5.0),
    st.floats(0.05, 0.95),
)
def test_u_shape_bounds(k, floor, extra_start, extra_end, power, center):
    start, end = floor + extra_start, floor + extra_end
    w = attention.u_shape(k, start=start, end=end, floor=floor, power=power, center=center)
    assert w.shape == (k,)
    assert np.all(w >= floor) and np.all(w > 0)
    assert np.all(w <= max(start, end) + 1e-12)
    assert w[0] == pytest.approx(start)
    if k > 1:
        assert w[-1] == pytest.approx(end)


@pytest.mark.parametrize(
    "params",
    [
        {"floor": 0.0},
        {"floor": -1.0, "start": 1.0, "end": 1.0},
        {"start": 0.5, "floor": 0.7},
        {"end": 0.5, "floor": 0.7},
        {"power": 0.0},
        {"center": 0.0},
        {"center": 1.0},
    ],
)
def test_u_shape_rejects_bad_parameters(params):
    with pytest.raises(ValueError, match="attention u_shape: "):
        attention.u_shape(5, **params)


@pytest.mark.parametrize("name", sorted(CURVES))
def test_curves_reject_k_below_one(name):
    with pytest.raises(ValueError):
        CURVES[name](0)


def test_one_check_of_k_for_curves_and_placements():
    from pipeline.context import placement

    assert attention.check_k(np.int64(3)) == 3 and type(attention.check_k(np.int64(3))) is int
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="K \\(the number of context slots\\) must be an integer >= 1"):
            attention.check_k(bad)
    assert attention.check_k(0, empty_ok=True) == 0  # placements: the empty context
    with pytest.raises(ValueError, match="must be an integer >= 0, got -1"):
        placement.none(-1)
    with pytest.raises(ValueError, match="must be an integer >= 1, got 0"):
        attention.log(0)


@pytest.mark.parametrize("name", sorted(CURVES))
def test_attention_configs_instantiate_to_curves(name):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    curve = instantiate(OmegaConf.load(CONF / "attention" / f"{name}.yaml"))
    w = curve(7)
    assert w.shape == (7,) and np.all(w > 0)
    np.testing.assert_allclose(w, CURVES[name](7))  # the YAML defaults equal the function's
    assert sorted(p.stem for p in (CONF / "attention").glob("*.yaml")) == sorted(CURVES)
