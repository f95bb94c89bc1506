"""Context placement: the order in which a query's top-K chunks enter the generator's context.

A strategy is a pure function ``strategy(k, weights=None) -> int64[k]`` whose entry ``s`` is
the 0-based rank of the chunk placed in slot ``s + 1``: a permutation of ``0..k-1``. The
config group ``conf/reorder`` registers each one with ``_partial_: true``. ``weights`` is the
attention curve over the k slots (see ``pipeline.context.attention``); only ``attention_optimal``
reads it.

``place`` applies a strategy to a ranking; ``context_utility`` scores the placed order
under an attention curve (docs/metrics.md, "Context placement": context utility).
Retrieval metrics are computed on the ranking before placement; placement only permutes
the top K, so counts of relevant chunks (precision, recall) are unchanged by it. Placements
accept K = 0 (the empty context).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from pipeline.context.attention import check_k, is_valley, unwrap
from pipeline.metrics import gain_values

Strategy = Callable[..., NDArray[np.int64]]
Curve = Callable[[int], NDArray[np.float64]]
_NOTHING = np.zeros(0, dtype=np.float64)  # the weights of no rank


def none(k: int, weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """Retriever order: slot i holds rank i (ranks 1..10 -> 1, 2, ..., 10)."""
    return np.arange(check_k(k, empty_ok=True), dtype=np.int64)


def reverse(k: int, weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """Best chunk last, next to the question: ranks 1..10 -> 10, 9, ..., 1."""
    return np.arange(check_k(k, empty_ok=True), dtype=np.int64)[::-1].copy()


def lost_in_the_middle(k: int, weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """Haystack's LostInTheMiddleRanker order: best first, second best last, alternating inwards.

    Source: deepset-ai/haystack, haystack/components/rankers/lost_in_the_middle.py
    (``LostInTheMiddleRanker.run``): starting from ``[0]``, rank j = 1..k-1 is inserted at
    index ``len(order) // 2 + len(order) % 2``. That insertion rule always yields the even
    ranks ascending followed by the odd ranks descending (0-based), for odd and even k:
    k = 10 -> 1, 3, 5, 7, 9, 10, 8, 6, 4, 2 and k = 9 -> 1, 3, 5, 7, 9, 8, 6, 4, 2 (1-based).
    """
    k = check_k(k, empty_ok=True)
    return np.concatenate([np.arange(0, k, 2), np.arange(1, k, 2)[::-1]]).astype(np.int64)


def lost_in_the_middle_langchain(k: int, weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """LangChain's LongContextReorder order (LlamaIndex's LongContextReorder gives the same).

    Source: langchain-ai/langchain,
    libs/community/langchain_community/document_transformers/long_context_reorder.py
    (``_litm_reordering``): the ranking is reversed (worst first), then item i of the reversed
    list is appended if i is odd and inserted at the front if i is even. LlamaIndex
    (run-llama/llama_index, llama-index-core/llama_index/core/postprocessor/node.py,
    ``LongContextReorder``) sorts by ascending score and applies the same rule.

    The result: the ranks of parity (k - 1) % 2 ascending, then the other ranks descending
    (0-based). For even k the best chunk ends up last (k = 10 -> 2, 4, 6, 8, 10, 9, 7, 5, 3, 1,
    1-based); for odd k it is first and the order equals Haystack's (k = 9 -> 1, 3, ..., 9,
    8, ..., 2).
    """
    k = check_k(k, empty_ok=True)
    front = (k - 1) % 2
    return np.concatenate([np.arange(front, k, 2), np.arange(1 - front, k, 2)[::-1]]).astype(np.int64)


def attention_optimal(k: int, weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """The i-th ranked chunk goes to the slot with the i-th highest attention weight.

    Slots are ordered by weight descending; equal weights keep slot order (earlier slot
    first, a stable sort). By the rearrangement inequality this placement maximises
    context utility whenever the ranking is in non-increasing order of grade.
    ``weights`` (the attention curve over the k slots) is required.
    """
    k = check_k(k, empty_ok=True)
    if weights is None:
        raise ValueError("reorder attention_optimal needs the weights of an attention curve")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (k,):
        raise ValueError(f"attention_optimal: expected {k} weights, got shape {w.shape}")
    slots_by_weight = np.argsort(-w, kind="stable")
    permutation = np.empty(k, dtype=np.int64)
    permutation[slots_by_weight] = np.arange(k, dtype=np.int64)
    return permutation


def place(doc_idx: NDArray[np.int64], k: int, strategy: Strategy,
          weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """The context order of each query's top k: int64[n_queries, k].

    Column s holds the document placed in slot s + 1, i.e. ``doc_idx[:, strategy(k)[s]]``.
    Rankings shallower than k are padded with -1 first; -1 ("nothing") entries are moved like
    any other, so a query with fewer than k results gets empty slots where its missing ranks
    are placed (the permutation is the same for every query).
    """
    k = check_k(k, empty_ok=True)
    doc_idx = np.asarray(doc_idx)
    if doc_idx.ndim != 2:
        raise ValueError(f"place: doc_idx must be [n_queries, depth], got shape {doc_idx.shape}")
    top = doc_idx[:, :k]
    if top.shape[1] < k:
        top = np.pad(top, ((0, 0), (0, k - top.shape[1])), constant_values=-1)
    permutation = _checked_permutation(strategy(k, weights), k)
    return top[:, permutation]


def _checked_permutation(permutation: NDArray[np.int64], k: int) -> NDArray[np.int64]:
    """``permutation`` as int64 when it is a permutation of 0..k-1 (an O(k) check); else ValueError."""
    permutation = np.asarray(permutation)
    ok = permutation.shape == (k,) and np.issubdtype(permutation.dtype, np.integer)
    if ok and k:
        ok = bool(permutation.min() >= 0 and permutation.max() < k)
        if ok:
            seen = np.zeros(k, np.bool_)
            seen[permutation] = True
            ok = bool(seen.all())
    if not ok:
        raise ValueError(f"placement strategy returned {permutation!r}, not a permutation of 0..{k - 1}")
    return permutation.astype(np.int64, copy=False)


def _columns(array: NDArray, width: int) -> NDArray[np.float64]:
    """The first ``width`` columns of a 2-D array as float64, zero-padded on the right."""
    array = np.asarray(array, dtype=np.float64)
    if array.shape[1] >= width:
        return array[:, :width]
    return np.pad(array, ((0, 0), (0, width - array.shape[1])))


def context_utility(grades: NDArray, ideal: NDArray, k_max: int, strategy: Strategy, curve: Curve,
                    gain: str = "exp") -> NDArray[np.float64]:
    """Context utility at every K = 1..k_max: float64[n_queries, k_max], column K - 1 for K.

        context_utility_at_K = sum_s gain(rel at slot s) * w_K(s)
                               / sum_j gain(ideal_j) * w_K^(j)

    where w_K = curve(K) is the attention curve stretched over K slots, the placed order is
    ``strategy(K, w_K)`` applied to the retriever's top K, ideal_j is the j-th best judged
    grade of the query and w_K^(j) the j-th largest weight (the best documents in the best
    slots, the maximum any placement of any ranking can reach). 0 when the denominator is 0
    (no judged grade above 0). gain: "exp" = 2^rel - 1, "linear" = rel.
    (docs/metrics.md, "Context placement": context utility.)

    ``grades`` [n_queries, depth]: grade of the retrieved document at each rank (0 for
    unjudged or nothing, already clipped >= 0); ``ideal`` [n_queries, >= k_max]: all judged
    grades of each query sorted descending, zero-padded. Both are zero-padded to k_max if
    narrower. With curve = log and strategy = none this is nDCG@K.
    """
    k_max = check_k(k_max, empty_ok=True)
    grades = np.asarray(grades)
    ideal = np.asarray(ideal)
    if grades.ndim != 2 or ideal.ndim != 2 or grades.shape[0] != ideal.shape[0]:
        raise ValueError(f"context_utility: grades {grades.shape} and ideal {ideal.shape} must be "
                         "[n_queries, depth] with the same number of queries")
    # Only the leading columns where some gain is not 0 can add to a sum: the work per K is
    # O(K) for the curve and the placement plus O(n_queries x width), width <= the depth of
    # the ranking, not O(n_queries x K).
    gains = gain_values(_columns(grades, min(k_max, grades.shape[1])), gain)  # type: ignore[arg-type]
    # Sorting is cheap and makes the denominator right even for an unsorted ideal array.
    ideal_gains = gain_values(-np.sort(-np.asarray(ideal, dtype=np.float64), axis=1)[:, :k_max], gain)  # type: ignore[arg-type]
    width = max(_used_width(gains), _used_width(ideal_gains))
    gains, ideal_gains = _columns(gains, width), _columns(ideal_gains, width)
    utility = np.zeros((grades.shape[0], k_max), dtype=np.float64)
    # Built-in strategy and curve: O(w) slots per K; else the whole curve. Same values, bit for bit.
    weights_and_best = fast_path(strategy, curve, width) or functools.partial(_general_path, strategy, curve)
    for k in range(1, k_max + 1):
        w = min(k, width)
        weight_of_rank, best_weights = weights_and_best(k, w)
        if w == 0:
            continue
        numerator = (gains[:, :w] * weight_of_rank).sum(axis=1)
        denominator = (ideal_gains[:, :w] * best_weights).sum(axis=1)
        np.divide(numerator, denominator, out=utility[:, k - 1], where=denominator > 0)
    return utility


def _general_path(strategy: Strategy, curve: Curve, k: int, w: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The weight received by ranks 0..w-1 when ``strategy`` places the top k under ``curve(k)``,
    and the w largest weights of ``curve(k)``, descending; the whole curve and the whole
    placement are computed and checked (ValueError for a bad curve or strategy), for any K,
    also when w = 0 (then both are empty)."""
    weights = np.asarray(curve(k), dtype=np.float64)
    if weights.shape != (k,) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(f"attention curve gave {weights!r} for K = {k}: need {k} finite weights >= 0")
    permutation = _checked_permutation(strategy(k, weights), k)
    if w == 0:
        return _NOTHING, _NOTHING
    # Weight received by each rank: the chunk of rank r sits in slot s where
    # permutation[s] = r. Summing over ranks (not slots) makes the numerator of the
    # attention-optimal placement of an ideal ranking the very same float sum as the
    # denominator (same products, same length w), so it scores exactly 1.
    slot_of_rank = np.empty(k, dtype=np.int64)
    slot_of_rank[permutation] = np.arange(k, dtype=np.int64)
    return weights[slot_of_rank[:w]], -np.sort(-weights if w == k else np.partition(-weights, w - 1)[:w])


def _slot_of_rank_lost_in_the_middle(k: int, ranks: NDArray[np.int64]) -> NDArray[np.int64]:
    # Even ranks ascending fill the first ceil(k/2) slots, then the odd ranks descending.
    largest_odd = k - 1 if (k - 1) % 2 else k - 2
    return np.where(ranks % 2 == 0, ranks // 2, (k + 1) // 2 + (largest_odd - ranks) // 2)


def _slot_of_rank_langchain(k: int, ranks: NDArray[np.int64]) -> NDArray[np.int64]:
    # Ranks of parity (k - 1) % 2 ascending, then the other parity descending from k - 2.
    front = (k - 1) % 2
    return np.where(ranks % 2 == front, (ranks - front) // 2, (k - front + 1) // 2 + (k - 2 - ranks) // 2)


#: Closed forms of the slot that rank r (0-based) takes, for the built-in strategies that do
#: not read the weights: the inverse permutation of ``strategy(k)`` at the given ranks,
#: in O(len(ranks)) (tests check them against the strategies themselves).
SLOT_OF_RANK: dict[Callable[..., NDArray[np.int64]], Callable[[int, NDArray[np.int64]], NDArray[np.int64]]] = {
    none: lambda k, ranks: ranks,
    reverse: lambda k, ranks: k - 1 - ranks,
    lost_in_the_middle: _slot_of_rank_lost_in_the_middle,
    lost_in_the_middle_langchain: _slot_of_rank_langchain,
}


def fast_path(strategy: Strategy, curve: Curve, width: int) -> Callable[[int, int], tuple[NDArray, NDArray]] | None:
    """For a built-in strategy under a built-in (valley-shaped) curve: ``f(k, w)`` giving the
    weight received by ranks 0..w-1 and the w largest weights of curve(k), descending, from
    O(w) slots (both empty when w = 0); None otherwise (``context_utility`` then evaluates the
    whole curve for every K).

    The values are those of the general path bit for bit: the curves evaluate each slot the
    same way alone as in the full vector, and attention_optimal gives rank r the r-th largest
    weight (equal weights in any order receive the same values), which are ``best`` itself.
    """
    if not is_valley(curve):
        return None
    strategy_fn, strategy_keywords = unwrap(strategy)
    slot_of_rank = None if strategy_keywords else SLOT_OF_RANK.get(strategy_fn)  # type: ignore[call-overload]
    if slot_of_rank is None and strategy_fn is not attention_optimal:
        return None
    curve_fn, curve_keywords = unwrap(curve)
    if curve_fn is not curve:  # the bare function: a partial's (Hydra's) wrapper costs per call
        curve = functools.partial(curve_fn, **curve_keywords)  # type: ignore[arg-type]

    def weights_and_best(k: int, w: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        if w == 0:
            return _NOTHING, _NOTHING
        ranks = ranks_all[:w]
        # The w largest weights of a valley lie among its first w and last w slots.
        split = k > 2 * w
        candidates = np.concatenate([ranks, ranks + (k - w)]) if split else ranks_all[:k]
        # Built-in curves with checked parameters: finite weights >= 0 by construction.
        values = curve(k, slots=candidates)
        best = -np.sort(-values)[:w]
        if slot_of_rank is None:  # attention_optimal: rank r gets the r-th largest weight
            return best, best
        if split:
            # Slots >= k - w sit at positions w.. of ``candidates``. Once k > 2w (w is then
            # the whole width), where each rank sits among the candidates depends on k's
            # parity only, for every built-in strategy: computed twice, not once per K.
            positions = split_positions.get(k % 2)
            if positions is None:
                slots = slot_of_rank(k, ranks)
                positions = split_positions[k % 2] = np.where(slots < w, slots, slots - (k - 2 * w))
            return values[positions], best
        return values[slot_of_rank(k, ranks)], best

    ranks_all = np.arange(2 * width, dtype=np.int64)  # enough for k <= 2w, w <= width
    split_positions: dict[int, NDArray[np.int64]] = {}
    return weights_and_best


def _used_width(values: NDArray[np.float64]) -> int:
    """1 + the last column holding a value other than 0 (0 when there is none)."""
    nonzero = np.flatnonzero((values != 0).any(axis=0))
    return int(nonzero[-1]) + 1 if len(nonzero) else 0
