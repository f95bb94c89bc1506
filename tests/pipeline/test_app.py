"""The experiment app: every config option runs, bad settings fail at once, the MLflow contract holds.
Its sweeps: test_app_sweeps.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from commands import run_job_command, run_pipeline_command
from no_figures import figures_off
from pipeline.job import run
from pipeline.metrics import CURVES
from sample_embeddings import copy_sample_embeddings

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SAMPLE = ROOT / "pipeline" / "sample"

FAMILIES_AT_K = ("precision", "recall", "hit_rate", "mrr", "map", "cg", "dcg", "ndcg", "context_utility")


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


def cli(*args: str, cwd: Path = ROOT, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env
    )


# --------------------------------------------------------------- every option runs


#: Options whose run loads the neural encoder: in the full suite, not the quick subset.
_ENCODER_OPTIONS = {("retriever", "dense"), ("retriever", "hybrid"), ("retriever", "hybrid_convex"),
                    ("retriever", "langchain"), ("retriever", "llamaindex")}
#: The user-code retrievers run functions of tests/retrievers/adapters_fixtures.py (on sys.path in the test).
_ADAPTERS = {
    "python": ["retriever.target=adapters_fixtures:sample_bm25"],
    "langchain": ["retriever.factory=adapters_fixtures:langchain_minilm"],
    "llamaindex": ["retriever.factory=adapters_fixtures:llamaindex_minilm"],
}


#: The option whose job draws its figures for real in test_every_config_option_composes_and_runs.
FIGURES_DRAWN_FOR = ("reorder", "none")


def _options() -> list:
    found = []
    for path in sorted(CONF.glob("*/*.yaml")):
        group = path.parent.name
        if group in ("hydra",):
            continue
        marks = [pytest.mark.slow] if (group, path.stem) in _ENCODER_OPTIONS else []
        found.append(pytest.param(group, path.stem, marks=marks, id=f"{group}-{path.stem}"))
    return found


#: Where the encoder options find the sample's embeddings (their ``retriever.cache_dir`` or
#: ``options.cache_dir``): the test's copy of the run's shared cache (tests/sample_embeddings.py,
#: encoded once by DenseRetriever in-process), so that none encodes: what is checked is that
#: the option composes and runs (the encoding: tests/retrievers/test_dense.py, the golden dense
#: job). The rankings go to the job's own ``cache_dir``.
_EMBEDDINGS = {"dense": "retriever.cache_dir", "hybrid": "retriever.second.cache_dir",
               "hybrid_convex": "retriever.second.cache_dir", "langchain": "+retriever.options.cache_dir",
               "llamaindex": "+retriever.options.cache_dir"}


def _overrides_for(group: str, option: str, tmp_path: Path, embeddings: Path) -> list[str] | None:
    """Overrides that make one option runnable on the sample collection (None: compose only)."""
    base = [f"cache_dir={tmp_path / 'cache'}", "tracking=none", "k=5", "k_max=10"]
    if group == "retriever" and option in _EMBEDDINGS:
        base.append(f"{_EMBEDDINGS[option]}={embeddings}")
    if group == "dataset":
        extra = {
            "sample": [],
            "sample_long": [],  # pipeline/sample_long: the sample's sections as documents
            "beir": [f"dataset.path={SAMPLE}"],
            "trec": [f"dataset.qrels={SAMPLE / 'qrels' / 'test.tsv'}", f"dataset.queries={SAMPLE / 'queries.jsonl'}",
                     f"dataset.corpus={SAMPLE / 'corpus.jsonl'}"],
            "ir_datasets": None,  # needs a registered id: tests/pipeline/test_data.py covers it
        }[option]
        return None if extra is None else [*base, f"dataset={option}", *extra]
    if group == "retriever" and option == "run_file":
        run_path = tmp_path / "bm25.trec"
        run_path.write_text("".join(f"{q} Q0 {d} {r} {10 - r} ext\n" for q, d, r in _sample_run()))
        return [*base, "retriever=run_file", f"retriever.path={run_path}"]
    if group == "retriever" and option in _ADAPTERS:
        return [*base, f"retriever={option}", *_ADAPTERS[option]]
    if group == "retriever" and option == "chroma":
        return None  # needs a loaded collection: tests/retrievers/test_chroma.py
    if group == "tracking":
        return None if option != "none" else base  # local and server: test_mlflow_contract, test_server.py
    if group == "experiment":
        return None  # a sweeper overlay: test_optuna_experiment
    return [*base, f"{group}={option}"]


def _sample_run():
    corpus = [json.loads(line)["_id"] for line in (SAMPLE / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line)["_id"] for line in (SAMPLE / "queries.jsonl").read_text().splitlines()]
    rng = np.random.default_rng(0)
    for q in queries:
        for r, d in enumerate(rng.choice(corpus, 8, replace=False), start=1):
            yield q, d, r


@pytest.mark.parametrize("group,option", _options())
def test_every_config_option_composes_and_runs(group, option, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)  # outputs/ of runs without Hydra's job dir land here
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "retrievers"))  # adapters_fixtures (_ADAPTERS)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embeddings = tmp_path / "embeddings"
    if group == "retriever" and option in _EMBEDDINGS:  # (the quick subset builds no shared cache)
        copy_sample_embeddings(request.getfixturevalue("sample_embeddings"), embeddings)
    overrides = _overrides_for(group, option, tmp_path, embeddings)
    if overrides is None:
        cfg = compose_cfg([f"{group}={option}"] + (["dataset.id=x"] if option == "ir_datasets" else []))
        assert OmegaConf.to_yaml(cfg)  # composes and resolves
        return
    cfg = compose_cfg(overrides)
    drawn = []
    if (group, option) != FIGURES_DRAWN_FOR:
        # The figures depend on the curves and k only (the same for every option here: k=5,
        # k_max=10), and matplotlib is most of a job's time on the sample: one option draws them,
        # the others hand them to a recorder (test_mlflow_contract checks that a tracked job logs
        # them, test_plots.py what they show).
        monkeypatch.setattr("pipeline.figures.save_run_figures", lambda *args: drawn.append(args) or [])
    value = run(cfg)
    if (group, option) != FIGURES_DRAWN_FOR:
        assert len(drawn) == 1 and drawn[0][2] == 5 and set(drawn[0][1]) >= {"precision", "recall", "ndcg"}
    else:
        assert len(list(tmp_path.glob("outputs/runs/*/*/results/plots/*.png"))) == 2
    assert 0.0 <= value <= 1.0
    results = sorted(tmp_path.glob("outputs/runs/*/*/results/metrics.json"))
    assert len(results) == 1
    written = json.loads(results[0].read_text())
    metrics = written["metrics"]
    assert value == metrics["ndcg_at_10"]
    if (group, option) == ("retriever", "dense"):  # the shared cache served the job: nothing encoded
        cost = written["cost"]["metrics"]  # (retrievers.cost: encode_s only when passages were encoded)
        assert "index_build_s" in cost and "encode_s" not in cost and "encode_passages_per_s" not in cost
    assert metrics["n_queries"] >= 40
    if group == "retriever" and option != "run_file":
        assert metrics["ndcg_at_10"] > 0.3  # a real retriever, not noise


@pytest.mark.slow
def test_objective_and_bad_settings_fail_at_once(tmp_path):
    """Each bad setting: exit 2, its one line, no traceback. The job's checks (what the job
    raises and prints) run in this process (tests/commands.py ``run_job_command``), as do an
    unknown option and a value that does not parse (``run_pipeline_command``: Hydra's main and
    the command-line check as ``python -m pipeline`` runs them; k=abc as a process:
    tests/faults/test_inputs.py); the first one and the sweep, whose unknown option is Hydra's
    own error, run as ``python -m pipeline`` processes (the exit status of the process)."""
    for i, (args, words) in enumerate([
        (["k=0"], "k must be >= 1, got k=0"),
        (["k=10", "k_max=5"], "k_max must be >= k"),
        (["objective=ndcg_at_50"], "needs K=50 within 1..k_max=20"),
        (["objective=accuracy"], "is not a metric"),
        (["relevance_level=0"], "relevance_level must be >= 1"),
        (["dataset=beir"], "dataset.path is required"),
        (["dataset=beir", f"dataset.path={tmp_path / 'nowhere'}"], "nowhere"),
    ]):
        run_ = cli if i == 0 else run_job_command  # the first as a process: the exit status of `python -m pipeline`
        proc = run_(*args, f"hydra.run.dir={tmp_path / 'run'}", "tracking=none")
        assert proc.returncode == 2, (args, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    proc = run_pipeline_command("retriever=nonexistent", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode != 0 and "retriever/nonexistent" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_pipeline_command("k=abc", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode != 0 and "k" in proc.stderr and "Traceback" not in proc.stderr
    # a sweep whose last value cannot be composed stops before its first job runs
    proc = cli("-m", "tracking=none", "reorder=none,reverse", "k=1,3", "attention=flat,nonexistent",
               f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode != 0 and "attention/nonexistent" in proc.stderr and "Traceback" not in proc.stderr
    assert not [p for p in (tmp_path / "sweep").iterdir() if p.is_dir()]  # no job folder


# --------------------------------------------------------------- MLflow contract


@pytest.mark.slow
def test_mlflow_contract(tmp_path, store):
    from mlflow import MlflowClient

    # in this process (tests/commands.py): what reaches the store is the job's doing, not the
    # process's (test_processes.py and the sweeps start tracked processes). Its figures are saved
    # and logged as files, not rendered (tests/no_figures.py): the plots/ artifacts are the claim
    # here; what a PNG shows is test_plots.py's, one job's real PNGs test_every_config_option's
    with figures_off():
        proc = run_job_command(
            "k=5", "reorder=lost_in_the_middle", f"tracking.uri={store}",
            f"tracking.artifact_root={tmp_path / 'artifacts'}", f"hydra.run.dir={tmp_path / 'run'}",
            f"cache_dir={tmp_path / 'cache'}", figures=True,
        )
    assert proc.returncode == 0, proc.stderr
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("sample")
    (run_,) = client.search_runs([experiment.experiment_id])
    assert run_.info.run_name == "bm25 k5 litm"
    assert run_.info.run_id in proc.stdout
    disk = json.loads((tmp_path / "run" / "results" / "metrics.json").read_text())
    logged = run_.data.metrics
    for family in FAMILIES_AT_K:
        assert logged[f"{family}_at_5"] == pytest.approx(disk["metrics"][f"{family}_at_5"], abs=1e-12)
    assert logged["ndcg_at_10"] == disk["metrics"]["ndcg_at_10"]
    for key in ("mrr", "map", "n_queries", "n_queries_no_relevant", "time_load_s", "time_retrieve_s",
                "time_score_s", "time_track_s"):
        assert key in logged, key
    assert not any("@" in key for key in logged)
    for name in CURVES:
        history = client.get_metric_history(run_.info.run_id, f"curve/{name}")
        assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(1, 21))
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(disk["curves"][name])
    params = run_.data.params
    assert params["k"] == "5" and params["reorder"] == "lost_in_the_middle"  # the option chosen, not its _target_
    assert not any("_target_" in key for key in params)
    assert params["retriever.k1"] == "1.2" and params["gain"] == "exp"
    tags = run_.data.tags
    assert tags["hydra_overrides"].startswith("k=5 reorder=lost_in_the_middle")
    assert len(tags.get("git_commit", "x" * 40)) == 40
    artifacts = {a.path for a in client.list_artifacts(run_.info.run_id)}
    assert {"metrics.json", "per_query.csv", "run.trec", "config.yaml", "definition_card.md", "plots",
            "per_query_table.json"} <= artifacts
    assert not {path for path in artifacts if path.startswith(".")}  # no lock or marker files
    plots = {a.path for a in client.list_artifacts(run_.info.run_id, "plots")}
    assert plots == {"plots/k_sweep.png", "plots/precision_recall.png"}
    (dataset_input,) = client.get_run(run_.info.run_id).inputs.dataset_inputs
    assert dataset_input.dataset.name == "sample" and len(dataset_input.dataset.digest) > 8


def test_collection_is_loaded_once_per_process_until_a_file_changes(tmp_path):
    from pipeline.config import Settings
    from pipeline.stages import load as load_settings

    def load(cfg):
        return load_settings(Settings.of(cfg))

    folder = tmp_path / "beir"
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("README.md"))
    cfg = compose_cfg(["dataset=beir", f"dataset.path={folder}"])
    first = load(cfg)
    assert load(cfg) is first
    corpus = folder / "corpus.jsonl"
    lines = corpus.read_text().splitlines()
    lines[0] = lines[0].replace('"text": "', '"text": "Edited. ', 1)
    corpus.write_text("\n".join(lines) + "\n")
    second = load(cfg)
    assert second is not first and second.digest != first.digest
    assert second.doc_texts[0].count("Edited.") == 1
    assert load(compose_cfg(["dataset=beir", f"dataset.path={folder}", "dataset.join=' | '"])) is not second


def test_slurm_launcher_config_composes():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=cpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher.partition == "cpu" and launcher.cpus_per_task == 4 and launcher.timeout_min == 120
    assert str(launcher.submitit_folder).endswith("/.submitit/%j")
