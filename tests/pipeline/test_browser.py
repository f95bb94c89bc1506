"""What a newcomer sees in the MLflow UI after one run: headless Chromium (Playwright) against a
real server, from a fresh browser profile (nothing preloaded: no stored UI settings).

The newcomer opens the link the run printed, sees the run page in MLflow's model-training
view with the run's description, closes the Assistant panel (one click), opens the runs table
and adds metric columns (the Columns button: MLflow shows none by default), then the Model
metrics tab (the K-sweep curves) and the per-query table artifact.

Screenshots go to tmp_path; with UPDATE_SCREENSHOTS=1 they also refresh the README's
docs/img/mlflow_{runs,run,curves,per_query}.png.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
RUN_NAME = "bm25 k10"  # the default config's run name
UI_TIMEOUT_MS = 90_000  # a loaded 2-core machine renders the UI slowly
VIEWPORT = {"width": 1920, "height": 1000}  # wide enough for the runs table with 4 metric columns
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
#: Metric columns the newcomer adds to the runs table (README: the Columns button).
TABLE_METRICS = ("ndcg_at_10", "recall_at_10", "mrr", "context_utility_at_10")
N_CURVES = 6  # curve/{precision,recall,ndcg,map,mrr,context_utility}
RUN_LINE = re.compile(r"^MLflow run (?P<run_id>[0-9a-f]{32}) \(", re.M)
OPEN_LINE = re.compile(r"^open it: (?P<url>http://\S+)$", re.M)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} missing (apt-get install chromium)"),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None, reason="playwright is not importable (pip install playwright)"
    ),
]


def _save(page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        dest = REPO / "docs" / "img" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)
    return shot


def test_a_newcomer_sees_the_run_its_curves_description_and_per_query_table(mlflow_server, run_pipeline, tmp_path):
    from mlflow import MlflowClient
    from playwright.sync_api import expect, sync_playwright

    proc = run_pipeline("tracking=server", f"tracking.uri={mlflow_server.uri}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    run_id = RUN_LINE.search(proc.stdout)["run_id"]
    exp_id = MlflowClient(tracking_uri=mlflow_server.uri).get_run(run_id).info.experiment_id
    link = OPEN_LINE.search(proc.stdout)
    assert link, proc.stdout
    assert link["url"] == f"{mlflow_server.uri}/#/experiments/{exp_id}/runs/{run_id}?workflowType=machine_learning"
    base = mlflow_server.uri

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT)  # a fresh profile: empty localStorage
        context.set_default_timeout(UI_TIMEOUT_MS)
        expect.set_options(timeout=UI_TIMEOUT_MS)
        page = context.new_page()
        try:
            # 1. The printed link: the run's page, model-training view, the description.
            assert context.storage_state() == {"cookies": [], "origins": []}  # nothing stored, nothing preloaded
            page.goto(link["url"])
            expect(page.get_by_role("heading", name=RUN_NAME).first).to_be_visible()
            nav = page.get_by_role("link", name="Models", exact=True)  # the model-training sidebar
            expect(nav.first).to_be_visible()
            expect(page.get_by_text("Evaluation runs", exact=True)).to_have_count(0)  # a GenAI sidebar item
            # The description: the dataset and headline metrics in its first lines, shown at once;
            # the settings, the curves' step and the artifacts below them ("Show more").
            expect(page.get_by_text(re.compile(r"^On sample \(52 queries, 171 documents\), at k = 10: nDCG 0\.\d{4}"))
                   .first).to_be_visible()
            expect(page.get_by_text("Show more", exact=True).first).to_be_visible()
            for text in ("step = K", "plots/k_sweep.png", "per_query_table.json"):
                expect(page.get_by_text(text, exact=True).first).to_be_attached()
            close = page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')
            if close.count():  # the Assistant panel opens on the first visit: one click closes it
                close.first.click()
            page.wait_for_timeout(1000)
            _save(page, tmp_path, "mlflow_run.png")

            # 2. The runs table lists the run; the Columns button adds metric columns.
            page.goto(f"{base}/#/experiments/{exp_id}/runs?workflowType=machine_learning")
            expect(page.get_by_role("heading", name="Runs", exact=True).first).to_be_visible()
            expect(page.get_by_role("link", name=RUN_NAME, exact=True).first).to_be_visible()
            page.get_by_role("button", name="Columns").click()
            for metric in TABLE_METRICS:  # type its name, tick its box (the list filters as one types)
                page.get_by_placeholder("Search columns").fill(metric)
                node = page.locator(".du-bois-light-tree-treenode").filter(
                    has_text=re.compile(rf"^\s*{re.escape(metric)}\s*$"))
                expect(node).to_have_count(1)
                page.wait_for_timeout(500)
                node.locator(".du-bois-light-tree-checkbox").click()
                expect(node.locator(".du-bois-light-tree-checkbox-checked")).to_have_count(1)
            page.keyboard.press("Escape")
            for metric in TABLE_METRICS:
                expect(page.get_by_role("columnheader").filter(has_text=metric).first).to_be_visible()
            page.wait_for_timeout(1000)
            _save(page, tmp_path, "mlflow_runs.png")

            # 3. The Model metrics tab draws the K-sweep curves, curve/precision among them.
            page.goto(link["url"])
            page.get_by_role("tab", name="Model metrics").click()
            expect(page).to_have_url(re.compile(rf"#/experiments/{exp_id}/runs/{run_id}/model-metrics"))
            card = page.get_by_test_id("experiment-view-compare-runs-card").filter(has_text="curve/precision")
            expect(card.first).to_be_visible()
            page.wait_for_function(
                "n => document.querySelectorAll('.js-plotly-plot path.js-line').length >= n", arg=N_CURVES
            )
            page.wait_for_timeout(1000)  # let plotly finish its transitions
            _save(page, tmp_path, "mlflow_curves.png")

            # 4. The per-query table artifact opens as a table: one row per query, with its text.
            page.get_by_role("tab", name="Artifacts").click()
            page.get_by_text("per_query_table.json", exact=True).first.click()
            for column in ("query_id", "query", "first_relevant_rank"):
                expect(page.get_by_role("columnheader").get_by_role("button", name=column, exact=True).first
                       ).to_be_visible()
            expect(page.get_by_role("cell", name="q01", exact=True).first).to_be_visible()
            page.wait_for_timeout(1000)
            _save(page, tmp_path, "mlflow_per_query.png")
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"))  # what the browser showed
            raise
        finally:
            browser.close()
