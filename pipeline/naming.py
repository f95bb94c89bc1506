"""Names of runs and sweeps: what tells them apart in MLflow's truncated name column.

A job's run is named by what sets it apart (``bm25 k10``); in a sweep, what the sweep varies
comes first (``k3 litm bm25``). A sweep's parent run is named by its overrides
(``sweep retriever=bm25,dense k=3,5``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from omegaconf import DictConfig

#: Overrides that never name a sweep: where things are written and logged.
WHERE = {"paths", "tracking", "hydra", "cache_dir", "verbose"}


#: Groups whose choice is in a run name, each with the default it omits (None: always named).
NAMED_GROUPS = {"retriever": None, "reorder": "none", "attention": "liu2023", "chunker": "none"}
#: Short forms of long option names, so names survive MLflow's truncated name column.
SHORT_NAMES = {"lost_in_the_middle": "litm", "lost_in_the_middle_langchain": "litm_lc",
               "attention_optimal": "attn_opt", "hybrid_convex": "convex"}
#: Overrides that never go into a name: where things are written and logged, the dataset
#: (the experiment's name), the objective, seed and the sweep's latency budget (they change no retrieval or placement).
NOT_NAMED = {"paths", "tracking", "hydra", "cache_dir", "dataset", "experiment", "objective", "seed", "verbose",
             "select"}
#: Dataset keys that do go into a name when given: they change the judgments or the queries
#: scored within one experiment (``bm25 k10 split=dev``, ``bm25 k10 qrels=consensus``).
NAMED_DATASET_KEYS = ("dataset.split", "dataset.qrels", "dataset.queries")


def run_name(names: dict[str, str], k: int, overrides: Sequence[str], choices: Mapping[str, str],
             swept: Sequence[str] = (), searched: Sequence[str] = ()) -> str:
    """A short name that tells runs apart in MLflow's truncated name column: what the sweep
    varies first (its keys in order, then the values an Optuna trial sampled), then the
    retriever, k, and every other non-default choice: reorder, attention curve, chunker (when
    not their defaults) and the command line's other overrides (``retriever.k1=0.9`` ->
    ``k1=0.9``), last the judgments or queries when given (:data:`NAMED_DATASET_KEYS`: runs
    scored on other judgments must not look the same). ``bm25 k10``; a sweep over k and
    reorder: ``k3 litm bm25``; an Optuna trial: ``k1=1.534 b=0.6121 bm25 k10``; other
    judgments: ``bm25 k10 qrels=consensus``."""
    given = {}
    for o in overrides:
        key, eq, value = o.lstrip("+").partition("=")
        if eq and not key.startswith("~"):
            given[key] = value
    chosen = {g: names.get(g) or choices.get(g) for g in NAMED_GROUPS}

    def token(key: str) -> str:
        if key == "k":
            return f"k{k}"
        if key in NAMED_GROUPS:
            return SHORT_NAMES.get(str(chosen[key]), str(chosen[key]))
        return f"{key.rsplit('.', 1)[-1]}={short(given.get(key, '?'))}"

    tokens: dict[str, str] = {}
    for key in [*swept, *searched]:
        if key in given or key in NAMED_GROUPS or key == "k":
            tokens.setdefault(key, token(key))
    for group, default in NAMED_GROUPS.items():
        if group == "retriever":
            tokens.setdefault("retriever", token("retriever"))
            tokens.setdefault("k", token("k"))
        elif chosen[group] and chosen[group] != default:
            tokens.setdefault(group, token(group))
    for key in given:
        if key not in NAMED_GROUPS and key.split(".", 1)[0] not in NOT_NAMED and "/" not in key:
            tokens.setdefault(key, token(key))
    for key in NAMED_DATASET_KEYS:
        if key in given:
            tokens.setdefault(key, f"{key.rsplit('.', 1)[-1]}={stem(given[key])}")
    return " ".join(tokens.values())


def stem(value: str) -> str:
    """A file's name without its folder and extensions (``judged/qrels.consensus.txt`` ->
    ``qrels.consensus``, ``dev.tsv.gz`` -> ``dev``); other values as :func:`short` shows them."""
    name = short(value)
    for suffix in (".gz", ".bz2", ".txt", ".tsv", ".trec", ".jsonl", ".json", ".qrels"):
        name = name.removesuffix(suffix)
    return name or short(value)


def short(value: str) -> str:
    """A value as a name shows it: numbers to 4 significant digits, paths by their last part."""
    try:
        return f"{float(value):.4g}"
    except ValueError:
        value = value.strip("'\"")
        return value.rstrip("/").rsplit("/", 1)[-1][:24] if "/" in value else value[:24]


def swept_overrides(config: DictConfig) -> list[tuple[str, str]]:
    """(key, values) of what the sweep varies: the command line's sweep overrides
    (``k=3,5``, ``range(...)``, ``interval(...)``) and a sweeper's own ``params`` (Optuna's
    search space, e.g. from ``experiment=tune_bm25``), in that order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(config.hydra.overrides.task)):
        if override.is_sweep_override():
            found[override.get_key_element().lstrip("+~")] = override.input_line.split("=", 1)[1]
    for key, spec in (config.hydra.sweeper.get("params") or {}).items():
        found.setdefault(str(key), str(spec))
    return list(found.items())


def sweep_name(config: DictConfig, swept: list[tuple[str, str]]) -> str:
    """The parent run's name: the sweep's overrides, short (``sweep retriever=bm25,dense k=3,5``;
    Optuna: ``sweep tune_bm25 k1=interval(0.2,3.0) b=interval(0.0,1.0)``), so sweeps differ
    in MLflow's truncated name column."""
    parts = ["sweep"]
    overlay = config.hydra.runtime.choices.get("experiment") if config.hydra.get("runtime") else None
    if overlay:
        parts.append(str(overlay))
    for key, values in swept:
        key = key if key in ("k", "k_max") or "." not in key else key.rsplit(".", 1)[-1]
        parts.append(f"{key}={values.replace(' ', '')}")
    if len(parts) == 1:  # nothing swept (``-m k=3``): the overrides it ran with
        parts += [o for o in config.hydra.overrides.task
                  if o.lstrip("+~").split("=", 1)[0].split(".", 1)[0].split("/", 1)[0] not in WHERE]
    return " ".join(parts)
