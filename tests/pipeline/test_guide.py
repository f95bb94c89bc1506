"""What a newcomer meets: a README that is a short guide whose commands, links and sample
output are true; names that survive MLflow's truncated name column; a description on every
run; the model-training experiment kind; and a console that says where to look next (no
ANSI codes when stdout is not a terminal)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from commands import run_job_command
from forked import import_what_a_sweep_imports, pipeline_child
from test_processes import MARKER_KEY, assert_none_outlive, new_marker

from pipeline import tracking
from pipeline.io import results as res
from pipeline.metrics import parse_key
from pipeline.naming import run_name

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: The pages a reader follows from the README.
GUIDE_PAGES = [README, REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NAMES = {"retriever": "bm25", "reorder": "none", "attention": "liu2023"}
#: MLflow's runs table shows about this many characters of a name before cutting it.
VISIBLE = 24
#: The README is a guide; details live in docs/ (issue "Docs as a user reads them").
README_MAX_LINES = 350
SETUP = ["pip install -e . && python -m pipeline", 'pip install -e ".[test]"', "python -m pytest -q -n 2 --dist loadfile"]
QUICK_SUBSET = 'python -m pytest -q -n 2 --dist loadfile -m "not slow"'


def _name(k: int = 10, overrides: tuple[str, ...] = (), swept: str = "", searched: tuple[str, ...] = (),
          **names: str) -> str:
    return run_name({**NAMES, **names}, k, list(overrides), {}, swept.split(), list(searched))


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    """The body of the README section ``## title`` (up to the next ``## ``)."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)


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


def test_the_readme_names_runs_as_the_code_names_them():
    """README, "Where to look in MLflow": a single job and a sweep over k and reorder."""
    text = _readme()
    single, swept = _name(), _name(3, ("k=3", "reorder=lost_in_the_middle"), swept="k reorder",
                                   reorder="lost_in_the_middle")
    assert (single, swept) == ("bm25 k10", "k3 litm bm25")
    assert f"`{single}`" in text and f"`{swept}`" in text


# ----------------------------------------------------------------------------- the README as a guide


def test_the_readme_is_a_guide_not_a_diary():
    text = _readme()
    assert len(text.splitlines()) <= README_MAX_LINES
    # The issue's outline, in this order; each feature is one paragraph and a link to its page.
    titles = re.findall(r"^## (.+)$", text, re.M)
    outline = ["Set up", "Quick start", "Reading your results", "Your own data", "Sweeps", "Judging your own corpus",
               "Chunking and token budgets", "Scoring any run file", "Comparing systems", "Scaling out"]
    assert [t for t in titles if t in outline] == outline
    pages = {"Sweeps": "docs/sweeps.md", "Judging your own corpus": "docs/judging.md",
             "Chunking and token budgets": "docs/chunking.md", "Scoring any run file": "docs/scoring.md",
             "Comparing systems": "docs/comparing.md", "Scaling out": "docs/scaling.md"}
    for title, page in pages.items():
        assert f"]({page})" in _section(text, title), title
    # No benchmark diary or test-timing history: performance numbers live in benchmarks/README.md.
    assert not re.search(r"(?<!/)\b20\d\d-\d\d-\d\d\b", text), "a dated entry in the README"  # (paths aside)
    assert "## Performance" not in text and "benchmarks/README.md" in text
    for gone in ("tracking process", "--stop", "PIPELINE_TRACKER_IDLE_S", "figure process"):
        assert gone not in text, gone


def test_the_setup_commands_are_those_that_ci_runs():
    block = _code_blocks(_section(_readme(), "Set up"))[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == SETUP
    ci = (REPO / ".ci" / "run").read_text()
    assert SETUP[2] in ci.splitlines()  # CI runs exactly README's test command
    installs = [line.strip() for line in ci.splitlines() if line.strip().startswith("pip install")]
    assert [i.replace(" -q", "") for i in installs] == [SETUP[1]]  # the test extra (the core within it)
    # The quick subset is documented, and "slow" is a registered marker.
    assert QUICK_SUBSET in _section(_readme(), "Set up")
    assert '"slow:' in (REPO / "pyproject.toml").read_text()


def test_the_core_install_has_no_test_tools_or_server_libraries():
    # README: `pip install -e .` runs jobs; test tools, oracles and the servers the suite
    # starts (Chroma, Ray, PostgreSQL, MLflow's auth app, a browser) come with ".[test]" only.
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    test = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in project["optional-dependencies"]["test"]}
    assert {"pytest", "pytest-xdist", "hypothesis", "pytrec-eval-terrier", "ranx", "chromadb", "ray",
            "psycopg", "playwright", "statsmodels"} <= test
    assert not core & {"pytest", "pytest-xdist", "hypothesis", "pytrec-eval-terrier", "ranx", "ir-measures",
                       "rank-bm25", "bm25s", "chromadb", "ray", "psycopg", "playwright", "statsmodels",
                       "scikit-learn", "langchain-core", "llama-index-core", "faiss-cpu", "onnxruntime",
                       "ir-datasets", "flask", "gunicorn", "uvicorn"}
    assert "mlflow" in core and not any("[" in d for d in project["dependencies"] if d.startswith("mlflow"))


def _commands(text: str) -> list[str]:
    """Every shell command line in the code blocks of ``text`` (continuations joined)."""
    lines = []
    for block in _code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith(("python ", "mlflow ")):
                lines.append(line)
    return lines


def test_the_readme_commands_name_modules_and_options_that_exist():
    commands = _commands(_readme())
    assert len(commands) >= 15
    groups = {p.name for p in (REPO / "conf").iterdir() if p.is_dir()} | {"hydra/launcher"}
    checked = 0
    for command in commands:
        module = re.match(r"python -m ([\w.]+)", command)
        if module:
            assert importlib.util.find_spec(module[1]) is not None, command
        for group, values in re.findall(r"(?<![\w.])([a-z_]+(?:/[a-z_]+)?)=([\w,]+)", command):
            if group not in groups:
                continue
            folder = REPO / "conf" / group if group != "hydra/launcher" else REPO / "conf" / "hydra" / "launcher"
            for value in values.split(","):
                known = (folder / f"{value}.yaml").exists() or (group == "hydra/launcher" and value in (
                    "basic", "joblib", "submitit_local", "submitit_slurm", "ray"))  # ray: hydra_plugins/
                assert known, f"{group}={value} in: {command}"
                checked += 1
    assert checked >= 15


def test_the_recommended_objectives_are_metrics():
    from pipeline.metrics import metric_key

    table = _readme().split("**Which metric answers which question**", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    named = {key for row in rows for key in re.findall(r"`([a-z_0-9]+)`", row[2])}
    assert {"ndcg_at_10", "recall_at_k", "context_utility_at_k", "context_recall_budget_1024"} <= named, named
    for key in named:
        assert metric_key(key).family and key.startswith(metric_key(key).family), key  # ValueError if unknown


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(page: Path) -> str:
    """A markdown page without its code blocks."""
    return re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces -> '-'."""
    found = set()
    for title in re.findall(r"^#{1,6} (.+)$", _prose(page), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def broken_links(pages: list[Path], root: Path = REPO) -> list[str]:
    """Every relative link of ``pages`` whose file (or heading anchor) does not exist, as
    ``page: target (why)`` with the page relative to ``root``."""
    broken = []
    for page in pages:
        for target in _LINK.findall(_prose(page)):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


def test_every_relative_link_of_the_guide_points_to_a_file_that_exists():
    assert len(GUIDE_PAGES) >= 12
    assert broken_links(GUIDE_PAGES) == []


def test_the_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n[ok](page.md#title) [gone](missing.md) [bad](page.md#nope) [web](https://x.org/a)\n")
    assert broken_links([page], tmp_path) == ["page.md: missing.md (no such file)",
                                              "page.md: page.md#nope (no such heading)"]


def test_the_readme_sample_output_is_what_the_job_prints(tmp_path):
    """README, "Quick start": the bundled sample with BM25 at k = 10; README, "Sweeps": the
    sweep's "best:" line, which a job with the best's settings prints alone (same seed).
    Both jobs run in this process (tests/commands.py), what they print captured."""
    proc = run_job_command("tracking=none", f"paths.root={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'job'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = _code_blocks(_section(_readme(), "Quick start"))[1].splitlines()
    printed = proc.stdout.splitlines()
    first = printed.index(shown[0])  # the summary line, word for word
    metric_lines = [line for line in shown if line.startswith("  ")]
    assert len(metric_lines) == 10
    assert printed[first + 1:first + 1 + len(metric_lines)] == metric_lines
    warning = [line for line in shown if line.startswith("warning:")]
    assert warning and warning[0] in printed
    # The MLflow lines (issue 37: README showed a run page's link; a job prints the runs table's),
    # README's root and ids made generic.
    results, run_line, hint = shown[shown.index(metric_lines[-1]) + 2:]
    assert results.startswith("results: /home/you/rag-retrieval-eval/outputs/runs/") and results.endswith("/results")
    assert re.fullmatch(r"MLflow run [0-9a-f]{32} \(bm25 k10\) in experiment 'sample' at sqlite:///outputs/mlflow\.db",
                        run_line)
    assert hint.replace("/home/you/rag-retrieval-eval", str(REPO)) == tracking.open_hint(
        f"sqlite:///{REPO}/outputs/mlflow.db", "1")

    # The sweep's best job, k5 litm, run alone with the sweep's objective: the same number and CI.
    best_job = run_job_command("tracking=none", "k=5", "reorder=lost_in_the_middle", "objective=context_utility_at_k",
                               f"paths.root={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'best'}")
    assert best_job.returncode == 0, best_job.stderr[-3000:]
    metrics = json.loads((tmp_path / "best" / "results" / "metrics.json").read_text())["metrics"]
    sweep_out = _code_blocks(_section(_readme(), "Sweeps"))[1]
    best = re.search(r"context_utility_at_k (\S+) \[95% CI (\S+), (\S+)\]", sweep_out)
    assert best, sweep_out
    assert [float(v) for v in best.groups()] == pytest.approx(
        [metrics["context_utility_at_k"], metrics["context_utility_at_k_ci_low"],
         metrics["context_utility_at_k_ci_high"]], abs=5e-5)


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
    """Process-level: the first run a newcomer makes, as ``python -m pipeline`` in a colour
    terminal's environment with pipes for stdout and stderr (``console.setup``: no ANSI codes),
    in a child forked from this process (tests/forked.py: ``pipeline/__main__.py`` without a new
    interpreter's imports). Also tests/test_processes.py's tracked job that creates its store:
    it leaves no process."""
    root = tmp_path / "fresh"  # no store here yet
    marker = new_marker()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", HF_HUB_OFFLINE="1", TERM="xterm-256color",  # a colour terminal
               **{MARKER_KEY: marker})
    import_what_a_sweep_imports()
    proc = pipeline_child("reorder=lost_in_the_middle", "attention=u_shape", f"paths.root={root}",
                          f"hydra.run.dir={tmp_path / 'job'}", f"cache_dir={tmp_path / 'cache'}", env=env,
                          cwd=REPO).wait(300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_none_outlive(marker, "a tracked job that created its store")
    out = proc.stdout
    assert "\x1b" not in out and "\x1b" not in proc.stderr  # stdout and stderr are pipes, not a terminal
    db = (root / "mlflow.db").resolve()
    notes = [line for line in out.splitlines() if line.startswith("note: no MLflow store in")]
    assert notes == [f"note: no MLflow store in {db.parent}; creating a new one, {db} (runs logged to other "
                     "stores are not in it; paths.root or tracking.uri picks the store)"]
    run_id = re.search(r"^MLflow run ([0-9a-f]{32}) \(bm25 k10 litm u_shape\)", out, re.M)[1]
    # The order README's "Quick start" gives: stage times before the block, track: after results:.
    lines = out.splitlines()
    at = {name: next(i for i, line in enumerate(lines) if pattern(line)) for name, pattern in (
        ("load", lambda line: line.endswith("[pipeline.job][INFO] - load: " + line.rsplit(": ", 1)[-1])),
        ("block", lambda line: line.startswith("bm25 k10 litm u_shape on sample: ")),
        ("results", lambda line: line.startswith("results: ")),
        ("track", lambda line: "[pipeline.job][INFO] - track: " in line),
        ("run", lambda line: line.startswith("MLflow run ")))}
    assert at["load"] < at["block"] < at["results"] < at["track"] < at["run"], out
    said = " ".join(_section(_readme(), "Quick start").split())
    assert "come before the block; `track:` (the time to log to MLflow) comes after `results:`, before the MLflow" in said
    hint = re.search(r"^open it: mlflow ui --backend-store-uri (\S+)   then (\S+)$", out, re.M)
    assert hint and hint[1] == f"sqlite:////{str(db).lstrip('/')}", out
    store = hint[1]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    run = client.get_run(run_id)
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == tracking.EXPERIMENT_KIND
    assert hint[2] == (f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs"
                       "?viewStateShareKey=headline&workflowType=machine_learning")
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


@pytest.mark.slow
def test_the_documented_pythonwarnings_hides_mlflow_uis_starlette_warning_and_only_it():
    """docs/mlflow.md: ``mlflow ui``'s StarletteDeprecationWarning is MLflow's (its server imports
    ``starlette.middleware.wsgi``); the PYTHONWARNINGS line the page gives hides that warning,
    and another Starlette deprecation still shows."""
    page = (REPO / "docs" / "mlflow.md").read_text()
    setting = re.search(r'^PYTHONWARNINGS="([^"]+)" mlflow ui ', page, re.M)[1]
    code = ("import warnings\nimport starlette.middleware.wsgi\nfrom starlette.exceptions import "
            "StarletteDeprecationWarning as W\nwarnings.warn('another deprecation', W)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "StarletteDeprecationWarning: starlette.middleware.wsgi is deprecated" in plain.stderr, plain.stderr
    hidden = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONWARNINGS": setting},
                            capture_output=True, text=True, timeout=60)
    assert "middleware.wsgi is deprecated" not in hidden.stderr and "another deprecation" in hidden.stderr
