"""Label Studio for real: pool -> project through the API -> two annotators through the API
and one grade typed in the browser -> export -> qrels -> a pipeline run on them; the server
is the session's ``label_studio`` (tests/e2e_servers.py), stopped and checked gone after this
test. Label Studio runs from its own virtual environment (lsserver.py). The pipeline run on the
judged qrels is a job in this process (tests/commands.py)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

import lsserver
from commands import job_in_process
from pipeline.cli import judgments as judgments_command
from pipeline.cli import pool as pool_command
from pipeline.io.formats import read_qrels
from pipeline.judging import labelstudio

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VERSION = lsserver.version()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(VERSION is None, reason=f"label-studio not installed at {lsserver.BIN} (.ci/run installs it "
                                               "in its own virtual environment; LABEL_STUDIO_BIN points elsewhere)"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} missing (apt-get install chromium)"),
]


def _grade_in_browser(url: str, project: int, task: int, key: str) -> float:
    """Log in as the admin, open the task's labeling page, press the grade's hotkey and submit
    with Ctrl+Enter; seconds taken."""
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{url}/user/login/")
            page.fill("input[name=email]", lsserver.ADMIN.email)
            page.fill("input[name=password]", lsserver.ADMIN.password)
            with page.expect_navigation():
                page.click("button[type=submit]")
            page.goto(f"{url}/projects/{project}/data?task={task}")
            page.get_by_text("How well does the document answer the question").wait_for()
            chosen = page.get_by_role("radio", name=re.compile(f"^{key}: ")).first
            chosen.wait_for()
            # The editor binds its hotkeys a moment after it renders: press until the grade is
            # selected (a press on a selected choice would clear it, so never press twice on it:
            # after a press, look for a second before the next).
            deadline = time.monotonic() + 30
            while not chosen.is_checked() and time.monotonic() < deadline:
                page.keyboard.press(key)
                pressed = time.monotonic()
                while not chosen.is_checked() and time.monotonic() - pressed < 1:
                    page.wait_for_timeout(100)
            assert chosen.is_checked(), f"hotkey {key} did not select the grade"
            with page.expect_response(lambda r: f"/api/tasks/{task}/annotations" in r.url
                                      and r.request.method == "POST", timeout=60_000) as response:
                page.keyboard.press("Control+Enter")
            assert response.value.status == 201, response.value.status
        finally:
            browser.close()
    return time.perf_counter() - start


def test_label_studio_round_trip(label_studio, tmp_path, monkeypatch):
    timings: dict[str, float] = {}
    queries = tmp_path / "topics.jsonl"
    sample = [json.loads(line) for line in (REPO / "pipeline/sample/queries.jsonl").read_text().splitlines()][:4]
    queries.write_text("".join(json.dumps(q) + "\n" for q in sample))
    corpus = REPO / "pipeline/sample/corpus.jsonl"
    truth = read_qrels(REPO / "pipeline/sample/qrels/test.tsv")
    true_grade = {(q, d): g for q, d, g in zip(truth.query_ids, truth.doc_ids, truth.grades.tolist())}

    server = label_studio  # the session's (tests/e2e_servers.py): stopped, and checked gone, at its end
    timings["server_start_s"] = server.start_seconds
    url = server.url
    # 1. pool the four questions (a corpus without judgments) into a new project, via the API
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", lsserver.ADMIN.token)
    out = tmp_path / "pool"
    t0 = time.perf_counter()
    assert pool_command.main(["dataset=trec", "dataset.qrels=null", f"dataset.queries={queries}",
                              f"dataset.corpus={corpus}", f"cache_dir={tmp_path / 'cache'}", "--retriever", "bm25",
                              "--depth", "3", "--out", str(out), "--label-studio", url, "--title",
                              "sample pool"]) == 0
    timings["pool_and_import_s"] = time.perf_counter() - t0
    admin = labelstudio.Client(url, lsserver.ADMIN.token)
    second = labelstudio.Client(url, lsserver.ANNOTATOR.token)
    project = max(p["id"] for p in admin.request("GET", "/api/projects")["results"])
    tasks = sorted(admin.tasks(project), key=lambda t: t["id"])
    pooled = [tuple(line.split("\t")) for line in (out / "pool.tsv").read_text().splitlines()[1:]]
    assert [(t["data"]["query_id"], t["data"]["doc_id"]) for t in tasks] == pooled and len(pooled) == 12

    # 2. the browser: the first task's grade typed with the keyboard (hotkey 2, Ctrl+Enter), on a
    #    task nobody has annotated yet (Label Studio would open an existing annotation)
    first = (tasks[0]["data"]["query_id"], tasks[0]["data"]["doc_id"])
    timings["browser_s"] = _grade_in_browser(url, project, tasks[0]["id"], "2")

    # 3. two annotators through the API (the admin graded the first task in the browser)
    given = {"admin": {first: 2}, "second": {}}
    for i, task in enumerate(tasks):
        item = (task["data"]["query_id"], task["data"]["doc_id"])
        grade = true_grade.get(item, 0)
        other = min(3, grade + 1) if i % 3 == 0 else grade
        second.annotate(task["id"], other)
        given["second"][item] = other
        if i:
            admin.annotate(task["id"], grade)
            given["admin"][item] = grade

    # 4. export through the API
    export = tmp_path / "export.json"
    export.write_text(json.dumps(admin.export(project)))

    # 5. qrels per annotator and consensus, agreement
    judged = tmp_path / "judged"
    assert judgments_command.main([str(export), "--out", str(judged)]) == 0
    who = {"admin": "user1", "second": "user2"}  # Label Studio's export names users by id
    for name, grades in given.items():
        q = read_qrels(judged / f"qrels.{who[name]}.txt")
        assert dict(zip(zip(q.query_ids.tolist(), q.doc_ids.tolist()), q.grades.tolist())) == grades, name
    stats = json.loads((judged / "agreement.json").read_text())
    items = sorted(given["admin"])
    a = [given["admin"][i] for i in items]
    b = [given["second"][i] for i in items]
    assert stats["pairs"][0]["kappa_quadratic"] == pytest.approx(
        cohen_kappa_score(a, b, weights="quadratic", labels=[0, 1, 2, 3]))

    # 6. a pipeline run on the consensus qrels (in this process: its outputs are what is checked)
    t0 = time.perf_counter()
    job_in_process("dataset=trec", f"dataset.qrels={judged / 'qrels.consensus.txt'}", f"dataset.queries={queries}",
                   f"dataset.corpus={corpus}", "tracking=none", f"paths.root={tmp_path / 'outputs'}")
    timings["pipeline_run_s"] = time.perf_counter() - t0
    metrics = json.loads(next((tmp_path / "outputs").rglob("metrics.json")).read_text())
    consensus = read_qrels(judged / "qrels.consensus.txt")
    relevant_queries = {q for q, g in zip(consensus.query_ids.tolist(), consensus.grades.tolist()) if g >= 1}
    assert metrics["metrics"]["n_queries"] == len(relevant_queries)
    assert metrics["collection"]["n_queries"] == len(set(consensus.query_ids.tolist()))
    print("\nLabel Studio round trip timings:", {k: round(v, 1) for k, v in timings.items()})
    assert np.isfinite(list(timings.values())).all()
