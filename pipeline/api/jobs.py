"""``pipeline.compare``, ``load_collection`` and ``run_job``: the comparison report, a
configured collection and a configured job, in this process.

- :func:`compare` builds ``python -m pipeline.cli compare``'s report (``pipeline.comparison``) from
  ``evaluate`` results, ``run_job`` results, job or sweep folders and run files.
- :func:`load_collection` composes ``conf/`` with Hydra's compose API and loads the dataset
  with the job's own stage (``pipeline.stages.load``): what a job with that dataset loads.
- :func:`run_job` composes ``conf/`` as ``python -m pipeline OVERRIDES`` does and runs the
  job with Hydra's own ``run_job`` (the launchers' function): the same folder (``.hydra/``,
  ``pipeline.log``, ``results/``), the same tracking; the logging Hydra sets up for the job
  is put back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, Union

from pipeline.api.evaluation import EvaluationResult
from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.comparison import (DEFAULT_METRICS, Report, build_report, format_markdown, format_table,
                                 load_system, load_systems, write_report)
from pipeline.comparison.systems import System, check_metrics, name_systems
from pipeline.comparison.verdict import DEFAULT_MARGIN, Verdict, check_margin
from pipeline.comparison.words import verdict_lines

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.io.collection import Collection

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
#: Hydra's job name for ``python -m pipeline`` (``hydra.job.name`` in ``.hydra/hydra.yaml``).
JOB_NAME = "__main__"


@dataclass
class JobResult:
    """A finished job: its folder, its record (``results/record.json``: params, metrics,
    curves, tags), its per-query table and its objective."""

    folder: Path
    record: dict[str, Any] = field(repr=False)
    objective: float

    @property
    def results(self) -> Path:
        return self.folder / res.RESULTS

    @property
    def metrics(self) -> dict[str, float]:
        return self.record["metrics"]

    @property
    def run_name(self) -> str:
        return str(self.record["run_name"])

    @property
    def per_query(self) -> "pd.DataFrame":
        import pandas as pd

        return pd.read_csv(self.results / "per_query.csv", dtype={"query_id": str}).set_index("query_id")

    @property
    def run_id(self) -> str | None:
        """The MLflow run id, when the job was tracked."""
        marker = res.read_marker(self.results)
        return None if marker is None else str(marker["run_id"])


# --------------------------------------------------------------------------- compare

SystemLike = Union[EvaluationResult, JobResult, str, Path]


@dataclass
class Comparison:
    """``python -m pipeline.cli compare``'s report, as :func:`compare` returns it: ``data`` is
    its JSON (``--json``)."""

    report: Report

    @property
    def data(self) -> dict[str, Any]:
        return self.report.data

    @property
    def verdict(self) -> Verdict:
        """The one inference (``comparison.verdict.Verdict``): per metric ``inferences[metric]``
        (``stats.Inference``: best, best_set, evidence, ``pair(a, b)``), per factor of a sweep
        ``answers[metric]``; ``data["verdict"]`` is its JSON."""
        return self.report.verdict

    def lines(self) -> list[str]:
        """The verdict in words, as the command prints it first: per metric, for two systems
        the sentence (who is better, by how much, p, queries, the settings they differ in),
        for more one line per factor of a sweep and the best set with its evidence."""
        return [line for m in self.data["metrics"] for line in verdict_lines(self.data, m)]

    def table(self, digits: int = 3) -> str:
        """What the command prints: the verdict, then the systems' table."""
        return format_table(self.report, digits)

    def to_markdown(self) -> str:
        """``report.md`` (without figures)."""
        return format_markdown(self.report)

    def write(self, out: str | Path) -> list[Path]:
        """``report.json``, ``report.md`` and the figures in ``out``, as ``--out`` does."""
        return write_report(self.report, out)

    def __repr__(self) -> str:
        return self.table()


def _from_result(name: str, result: EvaluationResult, metrics: Sequence[str]) -> System:
    """An ``evaluate`` result as the comparison's System: a run file's, with its scoring
    settings (``build_report`` refuses systems scored differently)."""
    scores = {m: {str(q): float(v) for q, v in result.values(m).items()} for m in metrics}
    st, scored = result.settings, result.scored
    scoring = {"gain": st["gain"], "relevance_level": str(st["relevance_level"]),
               "judged_only": str(st["judged_only"]).lower(), "qrels_digest": scored.qrels_digest(),
               "depth": str(scored.doc_idx.shape[1] if scored.doc_idx is not None else 0)}
    return System(name=name, kind="trec", spec=name, source=st["run"], scores=scores, run_name=name,
                  scoring=scoring)


def _systems(items: Sequence[tuple[str | None, SystemLike]], metrics: list[str], qrels: str | None, gain: str,
             relevance_level: int) -> list[System]:
    systems: list[System] = []
    for name, item in items:
        if isinstance(item, EvaluationResult):
            found = [_from_result(name or item.name, item, metrics)]
        elif isinstance(item, JobResult):
            found = [load_system(item.folder, metrics)]
        else:
            found = load_systems([str(item)], metrics, qrels=None if qrels is None else str(qrels), gain=gain,
                                 relevance_level=relevance_level)
        if name is not None and not isinstance(item, EvaluationResult):
            for s in found:
                s.name = name if len(found) == 1 else f"{name}/{s.name}"
        systems += found
    name_systems(systems)
    return systems


def compare(systems: Mapping[str, SystemLike] | Sequence[SystemLike], metrics: Sequence[str] = DEFAULT_METRICS,
            baseline: str | None = None, *, qrels: str | Path | None = None, gain: str = "exp",
            relevance_level: int = 1, out: str | Path | None = None, margin: float = DEFAULT_MARGIN,
            **options: Any) -> Comparison:
    """Compare systems on the same queries, as ``python -m pipeline.cli compare`` does.

    The one inference (who is better than whom, in four words against the practical
    ``margin``, in the metric's units; the best set; an answer per factor of a sweep), each
    claim with its simultaneous interval and adjusted p-value, marked against the best or the
    named ``baseline``; ``all_tests=True`` adds the full table of tests.

    ``systems``: a ``{name: system}`` dict or a list; a system is an ``evaluate`` result, a
    ``run_job`` result, a job or sweep folder, or a TREC run file (then pass ``qrels``;
    ``gain`` and ``relevance_level`` score it). ``options`` are the command's: ``test``,
    ``correction``, ``alpha``, ``n_resamples``, ``n_permutations``, ``seed``, ``missing``,
    ``delta``, ``allow_mixed`` (systems scored differently are refused otherwise), ``all_tests``.
    ``out``: write the report folder too (``--out``). A margin <= 0 or not finite is an InputError."""
    items = list(systems.items()) if isinstance(systems, Mapping) else [(None, s) for s in systems]
    metrics = check_metrics(list(metrics))
    try:
        report = build_report(_systems(items, metrics, qrels, gain, relevance_level), metrics, baseline=baseline,
                              margin=check_margin(margin, "margin"), **options)
    except ValueError as err:  # a computing module's word for bad input
        raise InputError(str(err)) from err
    if out is not None:
        write_report(report, out)
    return Comparison(report)


# --------------------------------------------------------------------------- configs


@contextlib.contextmanager
def _hydra() -> Iterator[Any]:
    """Hydra initialized on ``conf/`` for the block (restored after); yields its config loader."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        raise InputError("Hydra is already initialized in this process (a hydra.initialize() without `with`?): "
                         "call hydra.core.global_hydra.GlobalHydra.instance().clear() first")
    with initialize_config_dir(config_dir=str(CONF_DIR), job_name=JOB_NAME, version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def _require(cfg: Any) -> None:
    """InputError naming the first mandatory key (``???``) left unset."""
    from omegaconf import OmegaConf

    missing = sorted(k for key in cfg if key != "hydra" and OmegaConf.is_config(cfg[key])
                     for k in OmegaConf.missing_keys(cfg[key]))
    if missing:
        raise InputError(f"{missing[0]} is required: set it, e.g. {missing[0]}=...")


def load_collection(name_or_path: str | Path = "sample", **options: Any) -> "Collection":
    """A collection of ``conf/dataset``, loaded as a job with ``dataset=NAME`` loads it.

    ``name_or_path``: ``sample``, ``sample_long``, ``beir`` (``path=...``), ``trec``
    (``qrels=``, ``queries=``, ``corpus=``), ``ir_datasets`` (``id=...``), or a folder (a BEIR
    folder: ``beir`` with that path). ``options`` are the dataset's keys (``split="dev"``)."""
    from omegaconf import open_dict

    from pipeline import config, stages
    from pipeline.config import Settings

    name = str(name_or_path)
    if not (CONF_DIR / "dataset" / f"{name}.yaml").is_file():
        if not Path(name).expanduser().is_dir():
            known = sorted(p.stem for p in (CONF_DIR / "dataset").glob("*.yaml"))
            raise InputError(f"not a dataset ({', '.join(known)}) nor a folder", name)
        name, options = "beir", {"path": str(Path(name).expanduser().resolve()), **options}
    with _hydra():
        cfg = config.compose([f"dataset={name}", "tracking=none"])
    unknown = [k for k in options if k not in cfg.dataset.keys()]  # (``in`` is False for a ??? value)
    if unknown:
        raise InputError(f"dataset {name} has no option {unknown[0]!r} (it has "
                         f"{', '.join(k for k in cfg.dataset.keys() if not str(k).startswith('_'))})")
    with open_dict(cfg.dataset):
        cfg.dataset.update({k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()})
    _require(cfg)
    return stages.load(Settings.of(cfg))


# --------------------------------------------------------------------------- run_job


class _Callbacks:
    """The config's Hydra callbacks (``hydra.callbacks``), called as Hydra calls them."""

    def __init__(self, cfg: Any) -> None:
        from hydra.utils import instantiate

        self.callbacks = [instantiate(c) for c in (cfg.hydra.get("callbacks") or {}).values()]

    def __getattr__(self, event: str) -> Any:
        if not event.startswith("on_"):
            raise AttributeError(event)
        return lambda **kwargs: [getattr(c, event)(**kwargs) for c in self.callbacks]


def run_job(overrides: Sequence[str] = ()) -> JobResult:
    """``python -m pipeline OVERRIDES`` in this process: one job, the same folder (under
    ``paths.runs``, or ``hydra.run.dir=...``), tracked as the config says (``tracking=none``:
    not at all). Returns the job's folder, record, per-query table and objective; a user
    mistake raises InputError, a tracking failure ``TrackingFailed`` (results kept on disk)."""
    from hydra.core.utils import run_job as hydra_run_job
    from hydra.types import HydraContext
    from omegaconf import OmegaConf

    from pipeline import config, console, job

    overrides = [str(o) for o in overrides]
    if any(o.startswith("-") for o in overrides):
        raise InputError(f"{next(o for o in overrides if o.startswith('-'))}: run_job runs one job from overrides; "
                         "a sweep is `python -m pipeline -m ...`")
    outcome: dict[str, Any] = {}

    def task(cfg: Any) -> Any:
        try:
            outcome["objective"] = job.run(cfg)
        except Exception as exc:  # raised after Hydra's run_job has returned
            outcome["error"] = exc
            console.to_log_file(f"the job failed: {type(exc).__name__}: {exc}", exc)
        return outcome.get("objective")

    with _hydra() as loader:
        cfg = config.compose([*overrides, "hydra.mode=RUN"], hydra_config=True)  # as Hydra's own run sets it
        _require(cfg)
        folder = str(OmegaConf.select(cfg, "hydra.run.dir"))
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"cannot create the output folder ({err.strerror}); set hydra.run.dir or paths.root",
                             folder) from None
        callbacks = _Callbacks(cfg)
        callbacks.on_run_start(config=cfg)
        with _logging_restored():
            ret = hydra_run_job(hydra_context=HydraContext(config_loader=loader, callbacks=callbacks),  # type: ignore
                                task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None)
        callbacks.on_run_end(config=cfg)
    if "error" in outcome:
        raise job.user_error(outcome["error"]) or outcome["error"]
    out = Path(str(ret.hydra_cfg.hydra.runtime.output_dir))
    return JobResult(out, res.read_record(out / res.RESULTS), float(outcome["objective"]))


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    """The root logger as it was before the block (Hydra configures logging for a job: a
    console handler and the job's ``pipeline.log``, which are closed afterwards)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
