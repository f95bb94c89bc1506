"""The MLflow UI shows a job's run: headless Chromium (Playwright) against a real server.

Screenshots go to tmp_path; with UPDATE_SCREENSHOTS=1 they also refresh the README's
docs/img/mlflow_runs.png and docs/img/mlflow_curves.png.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
RUN_NAME = "bm25-none-k10"
UI_TIMEOUT_MS = 90_000  # a loaded 2-core machine renders the UI slowly
VIEWPORT = {"width": 1400, "height": 900}
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
#: Metric columns shown in the runs table (a UI preference seeded in localStorage).
TABLE_METRICS = ("ndcg_at_10", "recall_at_10", "mrr", "context_utility_at_10")
N_CURVES = 6  # curve/{precision,recall,ndcg,map,mrr,context_utility}
RUN_LINE = re.compile(r"^MLflow run (?P<run_id>[0-9a-f]{32}) \(", re.M)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} missing (apt-get install chromium)"),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None, reason="playwright is not importable (pip install playwright)"
    ),
]


def _ui_preferences(experiment_id: str) -> str:
    """An init script: the classic ML UI, no assistant panel, metric columns in the table."""
    state_key = f'MLflowLocalStorage-1.1-ExperimentPage-["{experiment_id}"]-ReactComponentState'
    state = {
        "selectedColumns": [f"metrics.`{m}`" for m in TABLE_METRICS],
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
    }
    return f"""
    (() => {{
      const set = (k, v) => {{ if (localStorage.getItem(k) === null) localStorage.setItem(k, v); }};
      set('mlflow.workflowType_v1', JSON.stringify('machine_learning'));
      set('mlflow.assistant.panelOpen_v1', 'false');
      set('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
      set({json.dumps(state_key)}, {json.dumps(json.dumps(state))});
    }})();
    """


def _save(page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        dest = REPO / "docs" / "img" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)
    return shot


def test_run_visible_in_mlflow_ui(mlflow_server, run_pipeline, tmp_path):
    from mlflow import MlflowClient
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    proc = run_pipeline("tracking=server", f"tracking.uri={mlflow_server.uri}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    match = RUN_LINE.search(proc.stdout)
    assert match, proc.stdout
    run_id = match["run_id"]
    run = MlflowClient(tracking_uri=mlflow_server.uri).get_run(run_id)
    exp_id = run.info.experiment_id
    base = mlflow_server.uri

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(UI_TIMEOUT_MS)
        expect.set_options(timeout=UI_TIMEOUT_MS)
        context.add_init_script(_ui_preferences(exp_id))
        page = context.new_page()
        try:
            # 1. The experiment's runs table lists the run.
            page.goto(f"{base}/#/experiments/{exp_id}/runs")
            expect(page.get_by_role("link", name=RUN_NAME, exact=True).first).to_be_visible()
            # Let the metric columns fill in before the picture (not asserted: a UI preference).
            try:
                page.get_by_text("ndcg_at_10", exact=True).first.wait_for(timeout=10_000)
            except PlaywrightTimeout:
                pass
            page.wait_for_timeout(1000)
            _save(page, tmp_path, "mlflow_runs.png")

            # 2. The run's page lists ndcg_at_10 among its metrics.
            page.goto(f"{base}/#/experiments/{exp_id}/runs/{run_id}")
            expect(page.get_by_role("heading", name=RUN_NAME).first).to_be_visible()
            expect(page.get_by_text("ndcg_at_10", exact=True).first).to_be_attached()

            # 3. Its "Model metrics" tab draws the K-sweep curves, curve/precision among them.
            page.get_by_role("tab", name="Model metrics").click()
            expect(page).to_have_url(re.compile(rf"#/experiments/{exp_id}/runs/{run_id}/model-metrics"))
            card = page.get_by_test_id("experiment-view-compare-runs-card").filter(has_text="curve/precision")
            expect(card.first).to_be_visible()
            expect(card.first.locator(".js-plotly-plot path.js-line").first).to_be_attached()
            # Every curve's chart drawn (not a spinner) before the picture.
            page.wait_for_function(
                "n => document.querySelectorAll('.js-plotly-plot path.js-line').length >= n", arg=N_CURVES
            )
            page.wait_for_timeout(1000)  # let plotly finish its transitions
            _save(page, tmp_path, "mlflow_curves.png")
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"))  # what the browser showed
            raise
        finally:
            browser.close()
