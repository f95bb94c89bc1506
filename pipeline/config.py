"""The config: its schema, its checks, and the one typed settings object a job reads.

``conf/config.yaml`` starts its defaults list with ``base_config``, the dataclass
:class:`PipelineConfig`, so a mistyped top-level key or a non-integer ``k`` fails while Hydra
composes, before any work. :meth:`Settings.of` turns the composed config into
:class:`Settings` (typed values, the tracking store as ``tracking.StoreSettings``, the option
groups as the nodes that ``hydra.utils.instantiate`` builds) and checks what spans keys
(``k_max >= k``, an objective that exists), raising :class:`InputError`. The stages read
:class:`Settings`, never the config by string.
"""

from __future__ import annotations

import copy
import typing
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline import metrics, stats, tracking
from pipeline.errors import InputError
from pipeline.tracking.store import DEFAULT_STORE, DEFAULT_TRACKING_URI
from retrievers.cost import CostSettings


class Gain(Enum):
    exp = "exp"
    linear = "linear"


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: str = DEFAULT_TRACKING_URI
    artifact_root: Optional[str] = "outputs/mlartifacts"  # for experiments this project creates
    experiment: Optional[str] = None  # default: the dataset's name
    run_name: Optional[str] = None  # default: {retriever}-{reorder}-k{k}
    log_per_query_table: bool = True
    http_retries: int = 2  # MLflow client retries against a server before giving up
    http_timeout_s: int = 20


@dataclass
class PathsConfig:
    """Everything a run writes, derived from one ``root`` (conf/paths/default.yaml)."""

    root: str = "outputs"
    runs: str = "outputs/runs"
    multirun: str = "outputs/multirun"
    cache: str = "outputs/cache"
    store: str = DEFAULT_STORE
    artifacts: str = "outputs/mlartifacts"


@dataclass
class CompareConfig:
    """How a comparison and a sweep's summary judge differences (docs/comparing.md)."""

    margin: float = 0.01  # the practical margin, in the objective's units: inside +-margin is "equivalent"


@dataclass
class CostConfig:
    """How a job measures retrieval cost (docs/metrics.md, "Cost"; ``retrievers.cost``)."""

    enabled: bool = True  # false: no timing, no cost keys
    warmup: int = 5  # queries searched untimed before the timed pass
    repeat: int = 1  # timed passes (latencies pooled; the ranking is the first pass's)
    per_query: bool = False  # time each query alone (one search call per query) instead of one batch


@dataclass
class SelectConfig:
    """How a sweep picks its answer (docs/sweeps.md, "Quality against cost")."""

    max_latency_p95_ms: Optional[float] = None  # a latency budget: the best job whose p95 is within it


@dataclass
class PipelineConfig:
    dataset: Any = None
    retriever: Any = None
    reorder: Any = None
    attention: Any = None
    chunker: Any = None  # conf/chunker: none (default), tokens, sentences, semantic (pipeline.chunkers)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    k: int = 10  # the cut-off the run is about (context size)
    k_max: int = 20  # every metric is computed for K = 1..k_max (curves)
    gain: Gain = Gain.exp  # nDCG / DCG / context utility gain: 2^rel - 1 or rel
    relevance_level: int = 1  # grade >= this counts as relevant
    judged_only: bool = False  # condensed lists: unjudged documents removed before scoring (trec_eval -J)
    seed: int = 0
    verbose: bool = False  # a sweep prints every job's full block (-v), not one line per job (pipeline.console)
    objective: str = "ndcg_at_10"  # what run() returns to a sweeper
    cache_dir: str = "outputs/cache"
    budget: Optional[int] = None  # tokens: the context is the longest prefix of the chunk ranking that fits
    budgets: list[int] = field(default_factory=lambda: [256, 512, 1024, 2048, 4096])  # logged per budget


ConfigStore.instance().store(name="base_config", node=PipelineConfig)

#: Budgets (tokens) whose context metrics a chunked or budgeted run logs when ``budgets`` is empty.
DEFAULT_BUDGETS = (256, 512, 1024, 2048, 4096)


@dataclass(frozen=True)
class Settings:
    """Everything a job reads from its config, typed, made once by :meth:`of`.

    The option groups (``dataset``, ``retriever``, ``reorder``, ``attention``, ``chunker``)
    stay config nodes: the stages build them with ``hydra.utils.instantiate``. ``store`` is
    None when tracking is off (``tracking=none``)."""

    k: int
    k_max: int
    gain: str  # "exp" | "linear"
    relevance_level: int
    judged_only: bool
    seed: int
    objective: str
    cache_dir: Path
    budget: int | None
    budgets: tuple[int, ...]  # every budget a chunked or budgeted run logs (with ``budget``), ascending
    runs_dir: Path
    store: tracking.StoreSettings | None
    experiment: str | None
    run_name: str | None
    log_per_query_table: bool
    dataset: DictConfig
    retriever: DictConfig
    reorder: DictConfig
    attention: DictConfig
    chunker: DictConfig | None
    config: DictConfig  # the whole composed config, credentials hidden (written as config.yaml, logged as params)
    cost: CostSettings = CostSettings()  # the ``cost:`` block: warm-up, repeats (retrievers.cost)

    @classmethod
    def of(cls, cfg: DictConfig) -> "Settings":
        """The settings of a composed config, checked (:func:`check`); InputError otherwise."""
        check(cfg)
        budget = cfg.get("budget")
        listed = [int(b) for b in (cfg.get("budgets") or DEFAULT_BUDGETS)]
        track = cfg.tracking
        return cls(
            k=int(cfg.k), k_max=int(cfg.k_max), gain=gain_name(cfg), relevance_level=int(cfg.relevance_level),
            judged_only=bool(cfg.get("judged_only", False)), seed=int(cfg.seed), objective=str(cfg.objective),
            cache_dir=Path(str(cfg.cache_dir)), budget=None if budget is None else int(budget),
            budgets=tuple(sorted(set(listed) | ({int(budget)} if budget is not None else set()))),
            runs_dir=Path(str(cfg.paths.runs)),
            store=tracking.StoreSettings.of(track) if track.enabled else None,
            experiment=track.get("experiment"),  # a run name is shown and written: never a secret in it
            run_name=None if track.get("run_name") is None else tracking.redact(str(track.run_name)),
            log_per_query_table=bool(track.get("log_per_query_table", True)),
            dataset=cfg.dataset, retriever=cfg.retriever, reorder=cfg.reorder, attention=cfg.attention,
            chunker=cfg.get("chunker"), config=redacted(cfg), cost=cost_settings(cfg))


def check(cfg: DictConfig) -> None:
    """Cross-key checks, before any work: raises InputError with a clear message."""
    if cfg.k < 1:
        raise InputError(f"k must be >= 1, got k={cfg.k}")
    if cfg.k_max < cfg.k:
        raise InputError(f"k_max must be >= k, got k={cfg.k} and k_max={cfg.k_max}")
    if cfg.relevance_level < 1:
        raise InputError(f"relevance_level must be >= 1, got {cfg.relevance_level}")
    if "compare" in cfg:
        try:
            stats.check_margin(cfg.compare.margin)
        except ValueError as err:
            raise InputError(f"compare.margin: {err}") from None
    latency_budget(cfg)
    for group in ("dataset", "retriever", "reorder", "attention"):
        if cfg.get(group) is None:
            raise InputError(f"no {group} configured: choose one, e.g. {group}=...")
        check_numbers(cfg[group], group)
    if cfg.get("chunker") is not None:
        check_numbers(cfg.chunker, "chunker")
    budgets = [("budget", cfg.get("budget"))] + [("budgets", b) for b in (cfg.get("budgets") or [])]
    for key, value in budgets:
        if value is not None and value < 1:
            raise InputError(f"{key} must be >= 1 token, got {value}")
    objective_k(cfg.objective, cfg.k_max, cfg.k)
    chunk_target = str((cfg.get("chunker") or {}).get("_target_", ""))
    budget_key = metrics.metric_key(cfg.objective).budget
    if ((cfg.objective.startswith(("context_precision_", "context_recall_")) or budget_key is not None)
            and cfg.get("budget") is None and (chunk_target.endswith("NoChunker") or not chunk_target)):
        raise InputError(f"objective {cfg.objective!r} is logged by chunked or budgeted runs only: set chunker=... "
                         "or budget=...")
    logged = {int(b) for b in (cfg.get("budgets") or DEFAULT_BUDGETS)}
    logged |= {int(cfg.budget)} if cfg.get("budget") else set()
    if budget_key is not None and budget_key not in logged:
        raise InputError(f"objective {cfg.objective!r} needs the budget {budget_key} among those the run logs "
                         f"(budgets={sorted(logged)}): add it to budgets=[...]")


def latency_budget(cfg: Any) -> float | None:
    """``select.max_latency_p95_ms`` in ms (None: no budget); InputError unless a positive finite
    number. A sweep checks it before its first job (``pipeline.sweep.callback``)."""
    from pipeline.sweep.pareto import check_budget

    try:
        return check_budget((cfg.get("select") or {}).get("max_latency_p95_ms"))
    except ValueError as err:
        raise InputError(str(err)) from None


def cost_settings(cfg: DictConfig) -> CostSettings:
    """The ``cost:`` block as :class:`~retrievers.cost.CostSettings`; a bad value is InputError."""
    node = cfg.get("cost") or {}
    try:
        return CostSettings(enabled=bool(node.get("enabled", True)), warmup=int(node.get("warmup", 5)),
                            repeat=int(node.get("repeat", 1)), per_query=bool(node.get("per_query", False)))
    except ValueError as err:
        raise InputError(str(err)) from None


_NUMBERS = {int: (int,), float: (int, float), bool: (bool,)}


def check_numbers(node: Any, where: str) -> None:
    """InputError when a key of a ``_target_`` node that its function declares ``int``,
    ``float`` or ``bool`` holds something else (``retriever.k1=abc``): the option groups
    are not in the structured schema, and this runs before any data is loaded."""
    from hydra.utils import get_object

    if not isinstance(node, DictConfig):
        return
    for key in node:
        if isinstance(node.get(key), DictConfig):
            check_numbers(node.get(key), f"{where}.{key}")
    target = node.get("_target_")
    if not isinstance(target, str):
        return
    try:
        obj = get_object(target)
        hints = typing.get_type_hints(obj.__init__ if isinstance(obj, type) else obj)
    except Exception:  # an unknown target is instantiate's to report; odd hints are skipped
        return
    for key, hint in hints.items():
        if key not in node or key.startswith("_"):
            continue
        options = [t for t in typing.get_args(hint) if t is not type(None)] if typing.get_args(hint) else [hint]
        allowed = tuple(t for option in options for t in _NUMBERS.get(option, (object,)))
        if not allowed or object in allowed:
            continue
        value = node.get(key)
        if value is None and type(None) in typing.get_args(hint):
            continue
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            kind = " or ".join(t.__name__ for t in options)
            raise InputError(f"{where}.{key} must be {kind}, got {value!r}")


def check_overrides(overrides: list[str]) -> None:
    """Command-line values of the structured schema's keys (``k=abc``, ``gain=cubic``),
    checked with OmegaConf's own conversion rules before Hydra composes: InputError names the
    override. Anything else (unknown keys, syntax, groups) is left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([o for o in overrides if not o.startswith("-")])
    except Exception:
        return
    schema = OmegaConf.structured(PipelineConfig)
    for override in parsed:
        key = override.key_or_group
        if override.is_delete() or override.package or OmegaConf.select(schema, key, default=_MISSING) is _MISSING:
            continue
        if not isinstance(OmegaConf.select(schema, key), (int, float, bool, str, Enum, type(None))):
            continue
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                continue
            values = list(override.sweep_iterator())
        else:
            values = [override.value()]
        for value in values:
            if isinstance(value, str) and "${" in value:
                continue
            try:
                OmegaConf.update(schema.copy(), key, value, merge=True)
            except OmegaConfBaseException as err:
                msg = str(err).splitlines()[0]
                raise InputError(f"{key}={value}: {msg}") from None


#: The config folder (``conf/``) that ``python -m pipeline`` composes.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose(overrides: Sequence[str], hydra_config: bool = False) -> DictConfig:
    """The config ``python -m pipeline OVERRIDES`` runs, from Hydra's compose API: the values
    checked first (:func:`check_overrides`), a bad override or option an InputError with
    Hydra's first line. Initializes Hydra on ``conf/`` for the call unless it is already (the
    Python API's ``run_job`` keeps it initialized for the job it launches); ``hydra_config``:
    with the ``hydra`` node, as a launcher gets it. The one compose of ``pipeline.api``,
    ``python -m pipeline.cli pool`` and ``index``."""
    overrides = [str(o) for o in overrides]
    check_overrides(overrides)
    try:
        if GlobalHydra.instance().is_initialized():
            return hydra_compose("config", overrides=overrides, return_hydra_config=hydra_config)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose("config", overrides=overrides, return_hydra_config=hydra_config)
    except (HydraException, OmegaConfBaseException) as err:  # an unknown option or key: Hydra's first line
        raise InputError(f"{' '.join(overrides)}: {str(err).strip().splitlines()[0]}") from None


_MISSING = object()


def objective_k(objective: str, k_max: int, k_job: int | None = None) -> int | None:
    """The cut-off of an objective key (None for ``mrr``/``map`` and budget keys; the job's
    ``k_job`` for ``<family>_at_k``, each job at its own k); InputError if unknown."""
    try:
        key = metrics.metric_key(objective)
    except ValueError as err:
        raise InputError(f"objective {err}") from None
    k = k_job if key.relative else key.k
    if k is not None and not 1 <= k <= k_max:
        raise InputError(f"objective {objective!r} needs K={k} within 1..k_max={k_max}")
    return k


def gain_name(cfg: DictConfig) -> str:
    gain = cfg.gain
    return gain.value if isinstance(gain, Enum) else str(gain)


def redacted(cfg: DictConfig) -> DictConfig:
    """The config with every credential hidden (``tracking.uri=http://alice:PW@host`` reads
    ``http://alice:***@host``; see ``tracking.redact``): a copy, resolved where a value
    changed, or ``cfg`` itself when nothing did. The one place a config is made fit to be
    written (config.yaml) or logged (params); the store settings are taken from ``cfg``
    before, so the job still reaches its server."""
    from omegaconf import open_dict, read_write

    changed: list[tuple[list[Any], str]] = []

    def walk(tree: Any, path: list[Any]) -> None:
        items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
        for key, value in items:
            if isinstance(value, str) and (hidden := tracking.redact(value)) != value:
                changed.append(([*path, key], hidden))
            else:
                walk(value, [*path, key])

    walk(resolved(cfg), [])
    if not changed:
        return cfg
    out = copy.deepcopy(cfg)
    with read_write(out), open_dict(out):
        for path, hidden in changed:
            node = out
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = hidden
    return out


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain containers (enums as strings)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """``{"retriever.k1": "1.2", ...}``: the MLflow params of a resolved config."""
    out: dict[str, str] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(tree, list) and any(isinstance(v, (dict, list)) for v in tree):
        for i, value in enumerate(tree):
            out.update(flatten(value, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = "null" if tree is None else str(tree)
    return out


def dataset_name(dataset: Any) -> str:
    """The name a dataset config will carry, known before loading it (for experiment names)."""
    get = dataset.get if hasattr(dataset, "get") else (lambda key, default=None: default)
    if get("name"):
        return str(get("name"))
    if get("path"):
        return Path(str(get("path"))).resolve().name
    if get("id"):
        return str(get("id"))
    if get("corpus"):
        return Path(str(get("corpus"))).resolve().parent.name
    target = str(get("_target_", "dataset"))
    return target.rsplit(".", 1)[-1].removeprefix("load_")
