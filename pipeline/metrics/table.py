"""The metric families: one row per family, the single source of names, labels, bounds and
definitions (the definition card's rows), and the metric keys built from them.

``ndcg_at_10`` is family ``ndcg`` at cut-off K = 10; ``mrr``, ``map`` and ``bpref`` name a
family's value at the ranking's full depth. MLflow rejects ``@`` in keys, so keys never use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal


@dataclass(frozen=True)
class Family:
    """One metric family: the single source of its name, label, bounds and definition.

    ``stage`` says what a family is computed on: ``ranking`` (``evaluate``, the retriever's
    order) or ``placed`` (the context order, added by the caller, e.g. context utility).
    ``full_depth`` names the family's value at the ranking's full depth, when it has one
    (``mrr``, ``map``, ``bpref``); ``at_k`` is False for a family that has only that value (no
    ``<name>_at_K`` keys, no curve: ``bpref``). ``definition`` is the row of the definition
    card; ``{gain}`` in it is replaced by the gain in use.
    """

    name: str
    label: str  # for figures: "nDCG@K"
    bounded: bool  # within [0, 1]
    curve: bool  # logged as the stepped metric curve/<name> (step = K)
    definition: str
    source: str
    stage: Literal["ranking", "placed"] = "ranking"
    full_depth: str | None = None
    at_k: bool = True

    @property
    def key(self) -> str:
        """How the definition card names it: ``ndcg_at_K``, or ``bpref`` for a full-depth-only family."""
        return f"{self.name}_at_K" if self.at_k else self.name


#: Every metric family, in the order of the per-query table. Adding a metric is one row here
#: and its computation (in ``evaluate`` for ``ranking`` families).
TABLE: tuple[Family, ...] = (
    Family("precision", "precision@K", True, True,
           "(# relevant in top K) / K; K is the denominator even if fewer were retrieved", "trec_eval `P`"),
    Family("recall", "recall@K", True, True, "(# relevant in top K) / R", "trec_eval `recall`"),
    Family("hit_rate", "hit rate@K", True, False, "1 if any relevant document is in the top K, else 0",
           "success@K"),
    Family("mrr", "MRR@K", True, True,
           "1 / rank of the first relevant document within K, else 0; `mrr` = the same at full depth",
           "trec_eval `recip_rank`", full_depth="mrr"),
    Family("map", "MAP@K", True, True,
           "sum over relevant ranks i <= K of precision_at_i, divided by R (trec_eval `map_cut`); "
           "`map` = at full depth", "trec_eval `map_cut`, `map`", full_depth="map"),
    Family("cg", "CG@K", False, False, "sum of rel_i for i <= K", "Järvelin & Kekäläinen 2002"),
    Family("dcg", "DCG@K", False, False, "sum of gain(rel_i) / log2(i + 1), gain = {gain}",
           "Järvelin & Kekäläinen 2002; Burges et al. 2005 (exponential gain)"),
    Family("ndcg", "nDCG@K", True, True,
           "dcg_at_K / idcg_at_K; idcg = the DCG of all judged grades of the query sorted descending, "
           "cut at K; 0 when idcg is 0", "trec_eval `ndcg_cut`; ranx `ndcg_burges` (exp gain)"),
    Family("context_utility", "context utility@K", True, True,
           "sum of gain(rel at slot i) * w(i) over the placed top K, divided by the same sum for the best "
           "judged documents in the best slots (w = the attention curve stretched over K slots); 1 = the "
           "strongest evidence sits where the model looks; chunked runs: the placed chunks, each with its document's "
           "grade, over every chunk of the judged documents", "this project (pipeline/context/placement.py)",
           stage="placed"),
    Family("context_precision", "context precision@K", True, False,
           "(# of the top K chunks whose document is relevant) / K: the share of the context from relevant "
           "documents (a chunk's grade is its document's); logged by chunked or budgeted runs only",
           "this project (pipeline/context/chunking.py)", stage="placed"),
    Family("context_recall", "context recall@K", True, False,
           "(# distinct relevant documents with a chunk in the top K) / R; logged by chunked or budgeted runs "
           "only", "this project (pipeline/context/chunking.py)", stage="placed"),
    Family("judged", "judged@K", True, True,
           "(# judged documents in the top K) / (# documents retrieved in the top K), i.e. / K unless the "
           "ranking is shorter; 0 when nothing was retrieved; judged = graded >= 0 for the query (0 "
           "included); always on the ranking as retrieved, also with `judged_only`",
           "ir_measures `Judged@K`"),
    Family("bpref", "bpref", True, False,
           "(1 / R) * sum over the judged relevant documents retrieved (full depth) of "
           "1 - min(n, R) / min(N, R), n = # judged non-relevant documents ranked above it, N = # judged "
           "non-relevant documents of the query (0 <= grade < relevance_level); unjudged documents are "
           "skipped; 0 when R = 0", "Buckley & Voorhees 2004; trec_eval `bpref`",
           full_depth="bpref", at_k=False),
)

FAMILY: dict[str, Family] = {f.name: f for f in TABLE}
#: Families computed by ``evaluate`` at every K, in the order of the per-query table.
FAMILIES = tuple(f.name for f in TABLE if f.stage == "ranking" and f.at_k)
#: Every family a run reports at a cut-off (the ranking's and the placed context's).
RUN_FAMILIES = tuple(f.name for f in TABLE if f.at_k)
#: Families of ``evaluate`` bounded by [0, 1] at every K (cg and dcg are not).
BOUNDED = tuple(f.name for f in TABLE if f.bounded and f.stage == "ranking" and f.at_k)
#: The K-sweep curves a run logs as ``curve/<family>`` (step = K).
CURVES = tuple(f.name for f in TABLE if f.curve)
#: Values at the ranking's full depth: ``mrr``, ``map``, ``bpref``.
FULL_DEPTH = tuple(f.full_depth for f in TABLE if f.full_depth)
#: A run warns when the mean judged_at_K at this K is below this share (``judged_warning``).
JUDGED_WARN_K = 10
JUDGED_WARN_BELOW = 0.9
#: Cut-offs reported besides a run's own k (those <= k_max), so runs with different k compare.
STANDARD_KS = (1, 3, 5, 10, 20, 50, 100)
LABELS = {f.name: f.label for f in TABLE}

_METRIC_KEY = re.compile(r"^(?P<family>[a-z_]+)_at_(?P<k>[0-9]+)$")


def parse_key(key: str) -> tuple[str, int | None]:
    """``"ndcg_at_10"`` -> ("ndcg", 10); ``"mrr"``/``"map"`` -> (name, None). ValueError otherwise."""
    if key in FULL_DEPTH:
        return key, None
    match = _METRIC_KEY.match(key)
    if not match or match["family"] not in FAMILY or not FAMILY[match["family"]].at_k:
        choices = ", ".join(f"{f}_at_K" for f in RUN_FAMILIES)
        raise ValueError(f"{key!r} is not a metric: use {', '.join(FULL_DEPTH)} or one of {choices}")
    return match["family"], int(match["k"])


def report_ks(k: int, k_max: int, extra: Iterable[int | None] = ()) -> list[int]:
    """The cut-offs a run reports: its k, the standard ones up to k_max, and any extra."""
    return sorted({k, *(c for c in STANDARD_KS if c <= k_max), *(e for e in extra if e is not None)})
