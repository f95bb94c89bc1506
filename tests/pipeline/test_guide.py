"""What a newcomer meets after a run: names that survive MLflow's truncated name column, a
description on every run, the model-training experiment kind, and a console that says where
to look next (no ANSI codes when stdout is not a terminal)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.io import results as res
from pipeline import tracking
from pipeline.job import JobContext, _run_name

REPO = Path(__file__).resolve().parents[2]
NAMES = {"retriever": "bm25", "reorder": "none", "attention": "liu2023"}
#: MLflow's runs table shows about this many characters of a name before cutting it.
VISIBLE = 24


def _name(k: int = 10, overrides: tuple[str, ...] = (), swept: str = "", searched: tuple[str, ...] = (),
          **names: str) -> str:
    ctx = JobContext(Path("job"), list(overrides), searched=list(searched))
    return _run_name({**NAMES, **names}, k, ctx, {"sweep_id": "s", "swept": swept} if swept else None)


def test_names_put_what_a_sweep_varies_first_and_every_non_default_choice():
    assert _name() == "bm25 k10"
    assert _name(reorder="lost_in_the_middle", attention="u_shape") == "bm25 k10 litm u_shape"
    assert _name(overrides=("retriever.k1=0.9", "paths.root=/x", "dataset.path=/d", "seed=3")) == "bm25 k10 k1=0.9"
    # A sweep over reorder x k: the swept keys lead, in the sweep's order, "none" included.
    grid = [_name(k, (f"reorder={r}", f"k={k}"), swept="reorder k", reorder=r)
            for r in ("none", "lost_in_the_middle", "lost_in_the_middle_langchain") for k in (3, 5, 10)]
    assert grid[0] == "none k3 bm25" and grid[-1] == "litm_lc k10 bm25"
    # Names differ within what the truncated column shows.
    assert len({n[:VISIBLE] for n in grid}) == len(grid)
    # An Optuna trial: the sampled values first, then the rest.
    trial = _name(overrides=("retriever.k1=1.53412", "retriever.b=0.3"), searched=("retriever.k1", "retriever.b"))
    assert trial == "k1=1.534 b=0.3 bm25 k10"


def test_an_experiment_made_by_an_older_version_gets_the_model_training_kind(store):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    old = client.create_experiment("old")  # as versions before this one made it: no kind tag
    settings = tracking.StoreSettings(uri=store)
    assert tracking.experiment_id(client, "old", settings) == old
    assert client.get_experiment(old).tags[tracking.TAG_EXPERIMENT_KIND] == tracking.EXPERIMENT_KIND
    new = tracking.experiment_id(client, "new", settings)
    assert client.get_experiment(new).tags[tracking.TAG_EXPERIMENT_KIND] == "custom_model_development"


def test_the_kind_is_one_the_installed_mlflow_ui_knows():
    """The value is the UI's own ExperimentKind for model training (read from its bundle)."""
    import mlflow

    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    mains = list(bundle.glob("main.*.js"))
    if not mains:
        pytest.skip("this mlflow has no built UI")
    text = mains[0].read_text(errors="replace")
    assert f'CUSTOM_MODEL_DEVELOPMENT="{tracking.EXPERIMENT_KIND}"' in text
    assert f'"{tracking.TAG_EXPERIMENT_KIND}"' in text or tracking.TAG_EXPERIMENT_KIND in "".join(
        p.read_text(errors="replace") for p in bundle.glob("*.js"))


@pytest.mark.slow
def test_a_run_in_a_new_folder_says_so_names_and_describes_itself_and_says_how_to_open_it(tmp_path):
    root = tmp_path / "fresh"  # no store here yet
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", HF_HUB_OFFLINE="1", TERM="xterm-256color")  # a colour terminal
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "reorder=lost_in_the_middle", "attention=u_shape",
         f"paths.root={root}", f"hydra.run.dir={tmp_path / 'job'}", f"cache_dir={tmp_path / 'cache'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "\x1b" not in out and "\x1b" not in proc.stderr  # stdout and stderr are pipes, not a terminal
    db = (root / "mlflow.db").resolve()
    notes = [line for line in out.splitlines() if line.startswith("note: no MLflow store in")]
    assert notes == [f"note: no MLflow store in {db.parent}; creating a new one, {db} (runs logged to other "
                     "stores are not in it; paths.root or tracking.uri picks the store)"]
    run_id = re.search(r"^MLflow run ([0-9a-f]{32}) \(bm25 k10 litm u_shape\)", out, re.M)[1]
    hint = re.search(r"^open it: mlflow ui --backend-store-uri (\S+)   then (\S+)$", out, re.M)
    assert hint and hint[1] == f"sqlite:////{str(db).lstrip('/')}", out
    store = hint[1]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    run = client.get_run(run_id)
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == tracking.EXPERIMENT_KIND
    assert hint[2] == (f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs/{run_id}"
                       "?workflowType=machine_learning")
    assert run.info.run_name == "bm25 k10 litm u_shape"
    assert run.data.tags[tracking.TAG_JOB_KEY] == res.read_record(tmp_path / "job" / "results")["job_key"]

    # The description: settings, the headline numbers as computed, the curves' step, the artifacts.
    note = run.data.tags["mlflow.note.content"]
    written = json.loads((tmp_path / "job" / "results" / "metrics.json").read_text())["metrics"]
    assert note.startswith(f"On **sample** (52 queries, 171 documents), at k = 10: nDCG {written['ndcg_at_10']:.4f}")
    assert "bm25 (k1=1.2, b=0.75" in note and "| k | 10 chunks" in note
    assert "reorder lost_in_the_middle, attention curve u_shape" in note
    for label, key in (("nDCG", "ndcg_at_10"), ("recall", "recall_at_10"), ("context utility", "context_utility_at_10")):
        assert f"{label} {written[key]:.4f}" in note
        assert run.data.metrics[key] == pytest.approx(written[key])
    ci = (written["ndcg_at_10_ci_low"], written["ndcg_at_10_ci_high"])
    assert f"95% CI {ci[0]:.4f} to {ci[1]:.4f}" in note
    assert "step = K" in note
    named = re.findall(r"`([\w/]+\.(?:png|json|md))`", note)
    assert {"plots/k_sweep.png", "per_query_table.json", "definition_card.md"} <= set(named)
    logged = {a.path for a in client.list_artifacts(run_id)} | {a.path for a in client.list_artifacts(run_id, "plots")}
    assert set(named) <= logged, set(named) - logged

    # The store is there now: the next run in this folder says nothing about it.
    assert tracking.new_store_note(store) is None and tracking.new_store_note(f"sqlite:///{db}") is None
