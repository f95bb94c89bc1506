"""Placement strategies, place() and context_utility (pipeline/context/placement.py)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline.context import attention, placement

CONF = Path(__file__).resolve().parents[2] / "conf"

STRATEGIES = {
    "none": placement.none,
    "reverse": placement.reverse,
    "lost_in_the_middle": placement.lost_in_the_middle,
    "lost_in_the_middle_langchain": placement.lost_in_the_middle_langchain,
    "attention_optimal": placement.attention_optimal,
}


# --- Oracles: the reference algorithms, re-implemented literally from their source ---------


def haystack_oracle(documents: list) -> list:
    """deepset-ai/haystack, haystack/components/rankers/lost_in_the_middle.py,
    LostInTheMiddleRanker.run (without top_k / word_count_threshold / deduplication)."""
    if not documents:
        return []
    documents_to_reorder = documents
    if len(documents_to_reorder) == 1:
        return documents_to_reorder
    document_index = list(range(len(documents_to_reorder)))
    lost_in_the_middle_indices = [0]
    for doc_idx in document_index[1:]:
        insertion_index = len(lost_in_the_middle_indices) // 2 + len(lost_in_the_middle_indices) % 2
        lost_in_the_middle_indices.insert(insertion_index, doc_idx)
    return [documents_to_reorder[idx] for idx in lost_in_the_middle_indices]


def langchain_oracle(documents: list) -> list:
    """langchain-ai/langchain,
    libs/community/langchain_community/document_transformers/long_context_reorder.py,
    _litm_reordering."""
    documents = list(documents)
    documents.reverse()
    reordered_result = []
    for i, value in enumerate(documents):
        if i % 2 == 1:
            reordered_result.append(value)
        else:
            reordered_result.insert(0, value)
    return reordered_result


def llamaindex_oracle(documents: list, scores: list[float]) -> list:
    """run-llama/llama_index, llama-index-core/llama_index/core/postprocessor/node.py,
    LongContextReorder._postprocess_nodes (nodes = (score, document) pairs)."""
    reordered_nodes: list = []
    ordered_nodes = sorted(zip(scores, documents), key=lambda x: x[0])
    for i, node in enumerate(ordered_nodes):
        if i % 2 == 0:
            reordered_nodes.insert(0, node)
        else:
            reordered_nodes.append(node)
    return [doc for _, doc in reordered_nodes]


def attention_optimal_oracle(weights: list[float]) -> list[int]:
    """Slots sorted by (weight descending, slot ascending); rank r (1-based) goes to the r-th."""
    slots = sorted(range(len(weights)), key=lambda s: (-weights[s], s))
    ranks = [0] * len(weights)
    for rank, slot in enumerate(slots, start=1):
        ranks[slot] = rank
    return ranks


# --- Exact outputs for K = 1..12 (1-based ranks in slots 1..K), printed by the oracles ------

HAYSTACK = {
    1: [1],
    2: [1, 2],
    3: [1, 3, 2],
    4: [1, 3, 4, 2],
    5: [1, 3, 5, 4, 2],
    6: [1, 3, 5, 6, 4, 2],
    7: [1, 3, 5, 7, 6, 4, 2],
    8: [1, 3, 5, 7, 8, 6, 4, 2],
    9: [1, 3, 5, 7, 9, 8, 6, 4, 2],  # Haystack's own test_lost_in_the_middle_order_odd
    10: [1, 3, 5, 7, 9, 10, 8, 6, 4, 2],  # docs/metrics.md, "Context placement"
    11: [1, 3, 5, 7, 9, 11, 10, 8, 6, 4, 2],
    12: [1, 3, 5, 7, 9, 11, 12, 10, 8, 6, 4, 2],
}
LANGCHAIN = {
    1: [1],
    2: [2, 1],
    3: [1, 3, 2],
    4: [2, 4, 3, 1],
    5: [1, 3, 5, 4, 2],
    6: [2, 4, 6, 5, 3, 1],
    7: [1, 3, 5, 7, 6, 4, 2],
    8: [2, 4, 6, 8, 7, 5, 3, 1],
    9: [1, 3, 5, 7, 9, 8, 6, 4, 2],
    10: [2, 4, 6, 8, 10, 9, 7, 5, 3, 1],  # docs/metrics.md, "Context placement"
    11: [1, 3, 5, 7, 9, 11, 10, 8, 6, 4, 2],
    12: [2, 4, 6, 8, 10, 12, 11, 9, 7, 5, 3, 1],
}
# attention_optimal under the liu2023 curve. K = 10 by hand from liu2023(10) =
# [.758 .660 .570 .556 .542 .543 .550 .566 .599 .632]: slots by weight are
# 1, 2, 10, 9, 3, 8, 4, 7, 6, 5, so ranks 1..10 go there and slots 1..10 hold
# 1, 2, 5, 7, 10, 9, 8, 6, 4, 3.
ATTENTION_OPTIMAL_LIU = {
    1: [1],
    2: [1, 2],
    3: [1, 3, 2],
    4: [1, 3, 4, 2],
    5: [1, 3, 5, 4, 2],
    6: [1, 3, 5, 6, 4, 2],
    7: [1, 3, 5, 7, 6, 4, 2],
    8: [1, 3, 5, 8, 7, 6, 4, 2],
    9: [1, 2, 5, 7, 9, 8, 6, 4, 3],
    10: [1, 2, 5, 7, 10, 9, 8, 6, 4, 3],
    11: [1, 2, 5, 7, 9, 11, 10, 8, 6, 4, 3],
    12: [1, 2, 5, 7, 9, 12, 11, 10, 8, 6, 4, 3],
}
KS = list(range(1, 13))


def _docs_placement_table() -> dict[str, list[int]]:
    """docs/metrics.md, "Context placement": the table of ``reorder=`` strategies and the ranks
    slots 1..10 hold (the strategies given as a list of ranks)."""
    page = (CONF.parent / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = page.split("\n## Context placement\n", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            name = cells[0].strip("`")
            if all(part.isdigit() for part in cells[1].split(",")):
                table[name] = [int(part) for part in cells[1].split(",")]
    return table


def test_the_docs_placement_table_for_k10_is_what_the_code_does():
    # The hand-written copy is docs/metrics.md, "Context placement"; read from there.
    table = _docs_placement_table()
    assert set(table) == {"none", "reverse", "lost_in_the_middle", "lost_in_the_middle_langchain"}
    assert table["lost_in_the_middle"] == HAYSTACK[10] and table["lost_in_the_middle_langchain"] == LANGCHAIN[10]
    for name, ranks in table.items():
        assert list(STRATEGIES[name](10) + 1) == ranks, name
    assert table["none"] == list(range(1, 11)) and table["reverse"] == list(range(10, 0, -1))


@pytest.mark.parametrize("k", KS)
def test_tables_come_from_the_oracles(k):
    ranks = list(range(1, k + 1))
    assert haystack_oracle(ranks) == HAYSTACK[k]
    assert langchain_oracle(ranks) == LANGCHAIN[k]
    # LlamaIndex sorts by ascending score; rank r has score -r.
    assert llamaindex_oracle(ranks, [-r for r in ranks]) == LANGCHAIN[k]
    assert attention_optimal_oracle(list(attention.liu2023(k))) == ATTENTION_OPTIMAL_LIU[k]


@pytest.mark.parametrize("k", KS)
def test_exact_outputs(k):
    assert placement.none(k).tolist() == [r - 1 for r in range(1, k + 1)]
    assert placement.reverse(k).tolist() == [r - 1 for r in range(k, 0, -1)]
    assert (placement.lost_in_the_middle(k) + 1).tolist() == HAYSTACK[k]
    assert (placement.lost_in_the_middle_langchain(k) + 1).tolist() == LANGCHAIN[k]
    got = placement.attention_optimal(k, attention.liu2023(k)) + 1
    assert got.tolist() == ATTENTION_OPTIMAL_LIU[k]


@pytest.mark.parametrize("k", [0, 13, 20, 31, 100, 257])
def test_litm_orders_match_oracles_beyond_12(k):
    ranks = list(range(k))
    assert placement.lost_in_the_middle(k).tolist() == haystack_oracle(ranks)
    assert placement.lost_in_the_middle_langchain(k).tolist() == langchain_oracle(ranks)


def test_attention_optimal_ties_and_monotone_curves():
    # Weights [1, .5, .5, 1]: slots by weight (stable) are 1, 4, 2, 3 -> ranks 1, 2, 3, 4 go
    # there, so slots 1..4 hold ranks 1, 3, 4, 2.
    assert (placement.attention_optimal(4, np.array([1.0, 0.5, 0.5, 1.0])) + 1).tolist() == [1, 3, 4, 2]
    # All weights equal: ties keep slot order, i.e. the identity.
    assert placement.attention_optimal(7, attention.flat(7)).tolist() == list(range(7))
    # A decreasing curve: the identity; an increasing one: the reverse.
    assert placement.attention_optimal(6, attention.log(6)).tolist() == list(range(6))
    assert placement.attention_optimal(6, attention.log(6)[::-1]).tolist() == list(range(5, -1, -1))
    with pytest.raises(ValueError, match="needs the weights of an attention curve"):
        placement.attention_optimal(3)
    with pytest.raises(ValueError):
        placement.attention_optimal(3, np.ones(4))


weights_for = st.integers(0, 60).flatmap(
    lambda k: st.tuples(
        st.just(k), hnp.arrays(np.float64, k, elements=st.floats(0, 10, allow_nan=False))
    )
)


@given(weights_for, st.sampled_from(sorted(STRATEGIES)))
def test_every_output_is_a_permutation(k_weights, name):
    k, weights = k_weights
    permutation = STRATEGIES[name](k, weights)
    assert permutation.dtype == np.int64
    assert permutation.shape == (k,)
    assert sorted(permutation.tolist()) == list(range(k))


def test_place_permutes_columns_and_keeps_missing():
    doc_idx = np.array([[10, 11, 12, 13, 14], [20, 21, -1, -1, -1]])
    placed = placement.place(doc_idx, 4, placement.lost_in_the_middle)
    # Haystack K = 4: slots hold ranks 1, 3, 4, 2.
    assert placed.tolist() == [[10, 12, 13, 11], [20, -1, -1, 21]]
    # A ranking shallower than k is padded with -1 before placement.
    shallow = placement.place(np.array([[7, 8]]), 3, placement.reverse)
    assert shallow.tolist() == [[-1, 8, 7]]
    weights = np.array([0.1, 0.2, 0.9])
    assert placement.place(np.array([[1, 2, 3]]), 3, placement.attention_optimal, weights).tolist() == [[3, 2, 1]]


@settings(max_examples=60)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.integers(1, 15).flatmap(
            lambda depth: st.tuples(
                hnp.arrays(np.int64, (n, depth), elements=st.integers(-1, 30)),
                st.integers(1, 20),
                st.frozensets(st.integers(0, 30)),
            )
        )
    ),
    st.sampled_from(sorted(STRATEGIES)),
)
def test_precision_and_recall_unchanged_by_placement(case, name):
    doc_idx, k, relevant = case
    weights = attention.liu2023(k)
    placed = placement.place(doc_idx, k, STRATEGIES[name], weights)
    relevant_list = sorted(relevant)
    before = np.isin(doc_idx[:, :k], relevant_list).sum(axis=1)
    after = np.isin(placed, relevant_list).sum(axis=1)
    np.testing.assert_array_equal(after, before)  # same count -> same precision and recall
    # Same multiset of documents per query.
    top = np.pad(doc_idx[:, :k], ((0, 0), (0, max(0, k - doc_idx.shape[1]))), constant_values=-1)
    np.testing.assert_array_equal(np.sort(placed, axis=1), np.sort(top, axis=1))


# --- context_utility -----------------------------------------------------------------------


def test_context_utility_flat_by_hand():
    # One query: ranks 1..3 have grades 2, 0, 1; its judged grades are 2, 1, 1 (one grade-1
    # document was not retrieved). Flat curve, so placement does not matter.
    grades = np.array([[2, 0, 1]])
    ideal = np.array([[2, 1, 1]])
    # exp gains: retrieved 3, 0, 1; ideal 3, 1, 1.
    #   K=1: 3 / 3 = 1;  K=2: (3 + 0) / (3 + 1) = 0.75;  K=3: (3 + 0 + 1) / (3 + 1 + 1) = 0.8
    for strategy in STRATEGIES.values():
        got = placement.context_utility(grades, ideal, 3, strategy, attention.flat, gain="exp")
        np.testing.assert_allclose(got, [[1.0, 0.75, 0.8]], rtol=0, atol=1e-15)
    # linear gains: K=1: 2/2 = 1;  K=2: 2/3;  K=3: (2 + 1) / (2 + 1 + 1) = 0.75
    got = placement.context_utility(grades, ideal, 3, placement.none, attention.flat, gain="linear")
    np.testing.assert_allclose(got, [[1.0, 2 / 3, 0.75]], rtol=0, atol=1e-15)


def _table_curve(k: int) -> np.ndarray:
    # A made-up curve, recomputed per K like the real ones: K=1 [1], K=2 [2, 1], K=3 [4, 1, 2].
    return np.array({1: [1.0], 2: [2.0, 1.0], 3: [4.0, 1.0, 2.0]}[k])


def test_context_utility_position_aware_by_hand():
    # Ranks 1..3 have grades 1, 2, 0; judged grades 2, 1. Linear gain.
    grades = np.array([[1, 2, 0]])
    ideal = np.array([[2, 1, 0]])
    # Denominators (sorted grades x sorted weights): K=1: 2*1 = 2; K=2: 2*2 + 1*1 = 5;
    # K=3: 2*4 + 1*2 + 0*1 = 10.
    # reverse:  K=1 slot1=rank1 (1):               1*1             = 1 -> 0.5
    #           K=2 slots = ranks 2, 1 (2, 1):     2*2 + 1*1       = 5 -> 1.0
    #           K=3 slots = ranks 3, 2, 1 (0,2,1): 0*4 + 2*1 + 1*2 = 4 -> 0.4
    got = placement.context_utility(grades, ideal, 3, placement.reverse, _table_curve, gain="linear")
    np.testing.assert_allclose(got, [[0.5, 1.0, 0.4]], rtol=0, atol=1e-15)
    # none:     K=1: 1 -> 0.5;  K=2: 1*2 + 2*1 = 4 -> 0.8;  K=3: 1*4 + 2*1 + 0*2 = 6 -> 0.6
    got = placement.context_utility(grades, ideal, 3, placement.none, _table_curve, gain="linear")
    np.testing.assert_allclose(got, [[0.5, 0.8, 0.6]], rtol=0, atol=1e-15)
    # lost_in_the_middle K=3: slots = ranks 1, 3, 2 (1, 0, 2): 1*4 + 0*1 + 2*2 = 8 -> 0.8
    # (K=1, 2 as for none). attention_optimal, w = [4, 1, 2]: slots by weight 1, 3, 2, so the
    # same order at K=3; at K=2 (w = [2, 1]) the identity.
    for strategy in (placement.lost_in_the_middle, placement.attention_optimal):
        got = placement.context_utility(grades, ideal, 3, strategy, _table_curve, gain="linear")
        np.testing.assert_allclose(got, [[0.5, 0.8, 0.8]], rtol=0, atol=1e-15)


def test_context_utility_exp_gain_several_queries():
    # Query 0: grades 0, 3 retrieved, judged 3, 1; log curve, none.
    #   K=1: 0 / 7 = 0;  K=2: (7 / log2 3) / (7 + 1 / log2 3)
    # Query 1: nothing judged relevant (ideal all 0): 0 everywhere.
    # Query 2: judged but nothing retrieved (grades 0): 0.
    grades = np.array([[0, 3], [0, 0], [0, 0]])
    ideal = np.array([[3, 1], [0, 0], [2, 0]])
    got = placement.context_utility(grades, ideal, 2, placement.none, attention.log, gain="exp")
    l3 = np.log2(3.0)
    expected = [[0.0, (7 / l3) / (7 + 1 / l3)], [0.0, 0.0], [0.0, 0.0]]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    # k_max beyond the depth and beyond the ideal width: zero-padded. Query 0 at K=3:
    # numerator as at K=2 (7 / log2 3); denominator 7 + 1 / log2 3 + 0.
    got3 = placement.context_utility(grades, ideal, 3, placement.none, attention.log, gain="exp")
    assert got3.shape == (3, 3)
    assert got3[0, 2] == pytest.approx((7 / l3) / (7 + 1 / l3), abs=1e-15)
    with pytest.raises(ValueError, match="gain must be 'exp' or 'linear'"):
        placement.context_utility(grades, ideal, 2, placement.none, attention.log, gain="cubic")


def _ndcg_reference(grades: np.ndarray, ideal: np.ndarray, k_max: int, gain: str) -> np.ndarray:
    """nDCG@K for K = 1..k_max, query by query, straight from the definition card."""
    g = (lambda r: 2.0**r - 1.0) if gain == "exp" else (lambda r: float(r))
    out = np.zeros((grades.shape[0], k_max))
    for q in range(grades.shape[0]):
        judged = sorted((int(x) for x in ideal[q]), reverse=True)
        for K in range(1, k_max + 1):
            dcg = sum(g(int(grades[q, i])) / np.log2(i + 2) for i in range(min(K, grades.shape[1])))
            idcg = sum(g(judged[i]) / np.log2(i + 2) for i in range(min(K, len(judged))))
            out[q, K - 1] = dcg / idcg if idcg > 0 else 0.0
    return out


@settings(max_examples=60)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.int64, (n, 8), elements=st.integers(0, 3)),
            hnp.arrays(np.int64, (n, 12), elements=st.integers(0, 3)),
        )
    ),
    st.integers(1, 12),
    st.sampled_from(["exp", "linear"]),
)
def test_log_curve_with_none_is_ndcg(arrays, k_max, gain):
    grades, judged = arrays
    ideal = -np.sort(-judged, axis=1)
    got = placement.context_utility(grades, ideal, k_max, placement.none, attention.log, gain=gain)
    np.testing.assert_allclose(got, _ndcg_reference(grades, ideal, k_max, gain), rtol=1e-12, atol=1e-12)


def _u_shape_curve(params: tuple[float, float, float, float, float]):
    floor, extra_start, extra_end, power, center = params
    return lambda k: attention.u_shape(
        k, start=floor + extra_start, end=floor + extra_end, floor=floor, power=power, center=center
    )


u_shape_curves = st.tuples(
    st.floats(0.01, 1.0),
    st.floats(0.0, 2.0),
    st.floats(0.0, 2.0),
    st.floats(0.2, 5.0),
    st.floats(0.05, 0.95),
).map(_u_shape_curve)


def _table(values: np.ndarray):
    return lambda k: values[:k]


curves = st.one_of(
    st.sampled_from([attention.liu2023, attention.log, attention.flat, attention.u_shape]),
    u_shape_curves,
    hnp.arrays(np.float64, 15, elements=st.floats(0.0, 5.0)).map(_table),
)


@settings(max_examples=80)
@given(
    st.integers(1, 4).flatmap(
        lambda n: hnp.arrays(np.int64, (n, 15), elements=st.integers(0, 4))
    ),
    st.integers(1, 15),
    curves,
    st.sampled_from(["exp", "linear"]),
)
def test_ideal_ranking_attention_optimal_is_one_and_the_best(judged, k_max, curve, gain):
    ideal = -np.sort(-judged, axis=1)
    grades = ideal.copy()  # retrieved in ideal order: non-increasing, the best judged first
    has_relevant = ideal[:, 0] > 0
    best = placement.context_utility(grades, ideal, k_max, placement.attention_optimal, curve, gain=gain)
    for K in range(1, k_max + 1):
        w = np.asarray(curve(K))
        reachable = has_relevant & (w.max() > 0)  # else the denominator is 0
        # exactly 1: the numerator is the same float sum as the denominator (same products, same order)
        np.testing.assert_array_equal(best[reachable, K - 1], 1.0)
        np.testing.assert_array_equal(best[~reachable, K - 1], 0.0)
    for name, strategy in STRATEGIES.items():
        got = placement.context_utility(grades, ideal, k_max, strategy, curve, gain=gain)
        assert np.all(got >= 0.0), name
        assert np.all(got <= best + 1e-12), name


def test_ideal_ranking_other_strategies_score_lower_under_liu():
    # Grades 3, 2, 1, 0, ... in ideal order: the Haystack order is not the liu2023 optimum at
    # K = 10 (slot 2 weighs more than slot 10), so it scores strictly below 1.
    ideal = np.array([[3, 2, 1, 1, 0, 0, 0, 0, 0, 0]])
    got = placement.context_utility(ideal, ideal, 10, placement.lost_in_the_middle, attention.liu2023)
    assert got[0, 9] < 1.0 - 1e-6
    best = placement.context_utility(ideal, ideal, 10, placement.attention_optimal, attention.liu2023)
    assert best[0, 9] == 1.0


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_reorder_configs_instantiate(name):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    strategy = instantiate(OmegaConf.load(CONF / "reorder" / f"{name}.yaml"))
    weights = attention.liu2023(10)
    np.testing.assert_array_equal(strategy(10, weights), STRATEGIES[name](10, weights))
    assert sorted(p.stem for p in (CONF / "reorder").glob("*.yaml")) == sorted(STRATEGIES)


# --- the O(width)-per-K path of context_utility ---------------------------------------------

BUILTIN_CURVES = {
    "liu2023": attention.liu2023,
    "flat": attention.flat,
    "log": attention.log,
    "u_shape": attention.u_shape,
    "u_shape_skewed": functools.partial(attention.u_shape, start=0.9, end=1.0, floor=0.3, power=1.5, center=0.3),
    "u_shape_flat_end": functools.partial(attention.u_shape, end=0.7, floor=0.7),  # ties on the right
}


@pytest.mark.parametrize("name", sorted(BUILTIN_CURVES))
def test_curve_at_slots_is_the_full_curve_bit_for_bit(name):
    curve = BUILTIN_CURVES[name]
    assert attention.is_valley(curve)
    for k in (1, 2, 3, 7, 20, 21, 171, 1000):
        slots = np.random.default_rng(k).permutation(k)[: max(1, k // 3)]
        assert np.array_equal(curve(k, slots=slots), curve(k)[slots])


@pytest.mark.parametrize("name", sorted(BUILTIN_CURVES))
def test_builtin_curves_are_valleys(name):
    # The fast path relies on it: the m largest weights lie among the first and last m slots.
    for k in range(1, 120):
        w = BUILTIN_CURVES[name](k)
        bottom = int(np.argmin(w))
        assert np.all(np.diff(w[: bottom + 1]) <= 0) and np.all(np.diff(w[bottom:]) >= 0), k


def test_slot_of_rank_inverts_each_strategy():
    for k in range(1, 80):
        ranks = np.arange(k)
        for strategy, slot_of_rank in placement.SLOT_OF_RANK.items():
            inverse = np.empty(k, dtype=np.int64)
            inverse[strategy(k)] = ranks
            np.testing.assert_array_equal(slot_of_rank(k, ranks), inverse, err_msg=f"{strategy.__name__} k={k}")


def test_fast_path_equals_the_general_path_bit_for_bit():
    # The general path runs for any curve that is not a built-in: a lambda around one.
    rng = np.random.default_rng(2024)
    for _ in range(8):
        n, depth, k_max = int(rng.integers(1, 6)), int(rng.integers(1, 30)), int(rng.integers(1, 70))
        grades = rng.integers(0, 4, (n, depth)) * (rng.random((n, depth)) < 0.4)
        ideal = -np.sort(-rng.integers(0, 4, (n, int(rng.integers(1, 30)))), axis=1)
        for strategy in STRATEGIES.values():
            for curve in BUILTIN_CURVES.values():
                for gain in ("exp", "linear"):
                    fast = placement.context_utility(grades, ideal, k_max, strategy, curve, gain)
                    general = placement.context_utility(grades, ideal, k_max, strategy, lambda k, c=curve: c(k), gain)
                    assert np.array_equal(fast, general), (strategy.__name__, k_max, gain)


def test_context_utility_work_is_linear_in_k_max(monkeypatch):
    # Count the slots the curve is evaluated at: O(width) per K, not O(K) (it was quadratic
    # in k_max, which made very large K unusable).
    evaluated = []

    def counted(k, slots=None):
        evaluated.append(k if slots is None else len(slots))
        return attention.liu2023(k, slots=slots)

    monkeypatch.setattr(placement, "is_valley", lambda curve: curve is counted)
    rng = np.random.default_rng(5)
    width, k_max = 20, 1500
    grades = rng.integers(0, 4, (7, width))
    ideal = -np.sort(-rng.integers(0, 4, (7, width)), axis=1)
    for strategy in STRATEGIES.values():
        evaluated.clear()
        got = placement.context_utility(grades, ideal, k_max, strategy, counted)
        assert len(evaluated) == k_max and sum(evaluated) <= 2 * width * k_max
        # the fast path (``counted``) and the general one (the lambda) agree bit for bit, by design
        np.testing.assert_array_equal(got[:, :60], placement.context_utility(
            grades, ideal, 60, strategy, lambda k: attention.liu2023(k)))


def test_the_configs_as_hydra_instantiates_them_take_the_fast_path():
    # Hydra's _partial_ wraps each function (a functools.partial subclass): it must still be
    # recognised, or a job silently takes the quadratic path.
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    for reorder in sorted((CONF / "reorder").glob("*.yaml")):
        for curve_file in sorted((CONF / "attention").glob("*.yaml")):
            strategy, curve = instantiate(OmegaConf.load(reorder)), instantiate(OmegaConf.load(curve_file))
            fast = placement.fast_path(strategy, curve, 4)
            assert fast is not None, (reorder.stem, curve_file.stem)
            grades = np.array([[3, 0, 1, 2]])
            ideal = np.array([[3, 2, 2, 1]])
            np.testing.assert_array_equal(
                placement.context_utility(grades, ideal, 30, strategy, curve),
                placement.context_utility(grades, ideal, 30, lambda k, w=None: strategy(k, w), lambda k: curve(k)))
