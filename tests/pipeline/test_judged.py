"""Incomplete judgments: judged_at_K (ir_measures ``Judged@K``), bpref (trec_eval ``bpref``) and
condensed lists (trec_eval ``-J``, pytrec_eval ``judged_docs_only_flag=True``), in the engine,
the scorer and a run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.metrics import (FAMILIES, FULL_DEPTH, UNJUDGED, Qrels, condense, definition_card, evaluate,
                              grade_matrix, judged_warning, parse_key)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
CUTS = (1, 3, 5, 10, 20, 50, 100)


def qrels_of(triples: list[tuple[int, int, int]]) -> Qrels:
    q, d, g = zip(*triples)
    return Qrels(np.array(q, np.int64), np.array(d, np.int64), np.array(g, np.int64))


def incomplete_collection(seed: int, n_q: int = 400, n_docs: int = 300, depth: int = 100, judged: int = 40,
                          low: int = -1, short: bool = True):
    """Graded qrels (grades ``low``..4; -1 = in the pool, not judged) that judge a minority of
    each ranking, rankings of varying length (some shorter than 100, -1 after), and distinct
    float32 scores per query. The share of relevant judgments varies by query, so some
    queries have fewer judged non-relevant documents than relevant ones (N < R) and some more."""
    rng = np.random.default_rng(seed)
    qi = np.repeat(np.arange(n_q), judged)
    di = np.concatenate([rng.choice(n_docs, judged, replace=False) for _ in range(n_q)])
    relevant = rng.random(len(qi)) < rng.uniform(0.05, 0.95, n_q)[qi]
    grades = np.where(relevant, rng.integers(1, 5, len(qi)), rng.integers(low, 1, len(qi)))
    ranking = np.stack([rng.choice(n_docs, depth, replace=False) for _ in range(n_q)])
    if short:
        lengths = rng.integers(1, depth + 1, n_q)
        ranking[np.arange(depth)[None, :] >= lengths[:, None]] = -1
    scores = np.sort(rng.permutation(n_q * depth).reshape(n_q, depth).astype(np.float32), axis=1)[:, ::-1]
    return Qrels(qi, di, grades), ranking, scores


def as_dicts(qrels: Qrels, ranking, scores):
    qd: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels.query_idx.tolist(), qrels.doc_idx.tolist(), qrels.grade.tolist()):
        qd.setdefault(f"q{q}", {})[f"d{d}"] = g
    rd = {f"q{q}": {f"d{d}": float(s) for d, s in zip(ranking[q].tolist(), scores[q].tolist()) if d >= 0}
          for q in range(len(ranking))}
    return qd, {q: docs for q, docs in rd.items() if docs}


def pytrec(qd, rd, measures, **kwargs):
    import pytrec_eval  # an oracle: missing, the test fails
    return pytrec_eval.RelevanceEvaluator(qd, set(measures), **kwargs).evaluate(rd)


def column(res, n_q: int, name: str) -> np.ndarray:
    """pytrec_eval's per-query values in query order; 0 for a query it has no run for."""
    return np.array([res[f"q{q}"][name] if f"q{q}" in res else 0.0 for q in range(n_q)])


# ----------------------------------------------------------------- exact hand cases

# q0 judges d0 (2), d1 (0), d2 (-1: pooled, not judged), d3 (1), d9 (0, not retrieved); q1 judges d5
HAND = qrels_of([(0, 0, 2), (0, 1, 0), (0, 2, -1), (0, 3, 1), (0, 9, 0), (1, 5, 1)])
HAND_RANKING = np.array([[0, 7, 2, 1, 3], [7, 5, -1, -1, -1]])  # d7 is judged for nobody


def test_hand_case_bpref_judged_and_condensed_lists():
    ev = evaluate(HAND_RANKING, HAND, k_max=6, gain="linear")
    # q0: R = 2 (d0, d3), N = 2 (d1, d9). d0 at rank 1: no judged non-relevant above -> 1;
    # d3 at rank 5: d1 above (d7 unjudged, d2 pooled but not judged) -> 1 - min(1, 2) / min(2, 2)
    assert ev.full["bpref"].tolist() == [(1 + 0.5) / 2, 1.0]
    # judged in the top K / retrieved in the top K: q0 d0 . . d1 d3; q1 . d5 (2 retrieved)
    assert ev.at_k["judged"][0].tolist() == [1, 1 / 2, 1 / 3, 2 / 4, 3 / 5, 3 / 5]
    assert ev.at_k["judged"][1].tolist() == [0, 1 / 2, 1 / 2, 1 / 2, 1 / 2, 1 / 2]
    cond = evaluate(HAND_RANKING, HAND, k_max=6, gain="linear", judged_only=True)
    # condensed: q0 d0 d1 d3; q1 d5
    assert cond.at_k["precision"][0, :3].tolist() == [1, 1 / 2, 2 / 3]
    assert cond.full["map"].tolist() == [(1 + 2 / 3) / 2, 1.0]
    assert cond.full["mrr"].tolist() == [1.0, 1.0]
    assert cond.full["bpref"].tolist() == ev.full["bpref"].tolist()  # bpref skips unjudged documents anyway
    assert np.array_equal(cond.at_k["judged"], ev.at_k["judged"])  # always the ranking as retrieved
    assert cond.judged_only and not ev.judged_only


def test_hand_case_equals_pytrec_eval():
    qd = {"q0": {"d0": 2, "d1": 0, "d2": -1, "d3": 1, "d9": 0}, "q1": {"d5": 1}}
    rd = {"q0": {"d0": 5.0, "d7": 4.0, "d2": 3.0, "d1": 2.0, "d3": 1.0}, "q1": {"d7": 2.0, "d5": 1.0}}
    for flag in (False, True):
        res = pytrec(qd, rd, {"bpref", "map", "recip_rank", "P_3", "ndcg_cut_3"}, judged_docs_only_flag=flag)
        ev = evaluate(HAND_RANKING, HAND, k_max=3, gain="linear", judged_only=flag)
        assert ev.full["bpref"].tolist() == pytest.approx([res["q0"]["bpref"], res["q1"]["bpref"]], abs=1e-15)
        assert ev.full["map"].tolist() == pytest.approx([res["q0"]["map"], res["q1"]["map"]], abs=1e-15)
        assert ev.at_k["precision"][:, 2].tolist() == pytest.approx([res[q]["P_3"] for q in ("q0", "q1")], abs=1e-15)
        assert ev.at_k["ndcg"][:, 2] == pytest.approx([res[q]["ndcg_cut_3"] for q in ("q0", "q1")], abs=1e-12)


def test_bpref_edge_cases():
    # no judged non-relevant document (N = 0): every relevant document retrieved counts 1 (= recall)
    ev = evaluate(np.array([[4, 0, 1]]), qrels_of([(0, 0, 1), (0, 1, 3), (0, 2, 1)]), k_max=3)
    assert ev.full["bpref"][0] == pytest.approx(2 / 3, abs=1e-15)
    # R = 0: bpref 0; nothing retrieved: 0; more non-relevant above than R: capped at R
    ev = evaluate(np.array([[1, 2, 3, 0], [-1, -1, -1, -1]]),
                  qrels_of([(0, 0, 1), (0, 1, 0), (0, 2, 0), (0, 3, 0), (1, 5, 1)]), k_max=2)
    assert ev.full["bpref"].tolist() == [0.0, 0.0]
    ev = evaluate(np.array([[0]]), qrels_of([(0, 0, 0)]), k_max=1)
    assert ev.full["bpref"][0] == 0.0 and ev.at_k["judged"][0, 0] == 1.0
    # relevance_level: grade 1 becomes judged non-relevant
    ev = evaluate(np.array([[1, 0]]), qrels_of([(0, 0, 2), (0, 1, 1), (0, 2, 1)]), k_max=2, relevance_level=2)
    assert ev.full["bpref"][0] == 0.0


def test_grade_matrix_marks_unjudged_and_keeps_the_default():
    ranking = np.array([[0, 7, 2, 1, 3], [7, 5, -1, -1, -1]])
    lookup = grade_matrix(ranking, HAND, unjudged=UNJUDGED)
    assert lookup.tolist() == [[2, -1, -1, 0, 1], [-1, 1, -1, -1, -1]]
    assert np.array_equal(grade_matrix(ranking, HAND), np.maximum(lookup, 0))
    docs, look = condense(ranking, lookup)
    assert docs.tolist() == [[0, 1, 3, -1, -1], [5, -1, -1, -1, -1]]
    assert look.tolist() == [[2, 0, 1, -1, -1], [1, -1, -1, -1, -1]]


def test_sparse_lookup_path_marks_unjudged_the_same(monkeypatch):
    from pipeline.metrics import grades

    qrels, ranking, _ = incomplete_collection(seed=5, n_q=30, n_docs=60, depth=30, judged=15)
    dense = grade_matrix(ranking, qrels, unjudged=UNJUDGED)
    monkeypatch.setattr(grades, "DENSE_CELLS", 0)
    assert np.array_equal(grade_matrix(ranking, qrels, unjudged=UNJUDGED), dense)
    assert np.array_equal(grade_matrix(ranking, qrels), np.maximum(dense, 0))


def test_keys_card_and_warning():
    assert "judged" in FAMILIES and "bpref" in FULL_DEPTH and "bpref" not in FAMILIES
    assert parse_key("judged_at_10") == ("judged", 10) and parse_key("bpref") == ("bpref", None)
    with pytest.raises(ValueError):
        parse_key("bpref_at_10")
    card = definition_card("linear", 1, "x")
    assert "| `judged_at_K` |" in card and "| `bpref` |" in card and "judged_only: false" in card
    assert "This run scored condensed lists" in definition_card("linear", 1, "x", judged_only=True)
    assert judged_warning({"judged_at_10": 0.9}) is None and judged_warning({"ndcg_at_10": 0.1}) is None
    text = judged_warning({"judged_at_10": 0.8123})
    assert "judged_at_10 = 0.8123" in text and "biased low" in text and "pool it" in text


@given(st.integers(0, 10_000), st.integers(1, 3))
@settings(max_examples=40, deadline=None)
def test_existing_metrics_unchanged_and_properties(seed, level):
    qrels, ranking, _ = incomplete_collection(seed, n_q=8, n_docs=30, depth=12, judged=10)
    ev = evaluate(ranking, qrels, k_max=15, gain="linear", relevance_level=level)
    old = evaluate(ranking, qrels, k_max=15, gain="linear", relevance_level=level, judged_metrics=False)
    assert set(old.at_k) == set(ev.at_k) - {"judged"} and set(old.full) == {"mrr", "map"}
    for family in old.at_k:
        assert np.array_equal(old.at_k[family], ev.at_k[family]), family
    for values in (ev.at_k["judged"], ev.full["bpref"][:, None]):
        assert (values >= 0).all() and (values <= 1 + 1e-12).all()
    # every retrieved document judged (-1 grades made 0, the rest added as 0): condensed lists = rankings
    listed = grade_matrix(ranking, Qrels(qrels.query_idx, qrels.doc_idx, np.zeros_like(qrels.grade)), UNJUDGED) >= 0
    added = ~listed & (ranking >= 0)
    full = Qrels(np.concatenate([qrels.query_idx, np.nonzero(added)[0]]), np.concatenate([qrels.doc_idx, ranking[added]]),
                 np.concatenate([np.maximum(qrels.grade, 0), np.zeros(added.sum(), np.int64)]))
    whole, cond = evaluate(ranking, full, 15, relevance_level=level), evaluate(ranking, full, 15, relevance_level=level,
                                                                              judged_only=True)
    for family in whole.at_k:
        assert np.array_equal(whole.at_k[family], cond.at_k[family]), family
    assert (whole.at_k["judged"][ranking[:, 0] >= 0] == 1).all()


# ----------------------------------------------------------------- oracles on random runs


@pytest.mark.parametrize("relevance_level", [1, 2])
def test_bpref_and_condensed_lists_equal_pytrec_eval(relevance_level):
    qrels, ranking, scores = incomplete_collection(seed=relevance_level)
    n_q = len(ranking)
    qd, rd = as_dicts(qrels, ranking, scores)
    cuts = ",".join(map(str, CUTS))
    measures = {f"P.{cuts}", f"recall.{cuts}", f"ndcg_cut.{cuts}", f"map_cut.{cuts}", "recip_rank", "map", "bpref"}
    ev = evaluate(ranking, qrels, k_max=100, gain="linear", relevance_level=relevance_level)
    res = pytrec(qd, rd, {"bpref"}, relevance_level=relevance_level)
    mask = ev.evaluated
    assert mask.sum() > 0.9 * n_q
    R, N = ev.n_relevant, np.bincount(qrels.query_idx[(qrels.grade >= 0) & (qrels.grade < relevance_level)],
                                      minlength=n_q)
    assert (N < R).sum() > 50 and (N > R).sum() > 50  # both branches of min(N, R)
    assert np.abs(ev.full["bpref"] - column(res, n_q, "bpref"))[mask].max() <= 1e-12
    assert 0.05 < ev.full["bpref"][mask].mean() < 0.95  # neither trivially 0 nor 1
    cond = evaluate(ranking, qrels, k_max=100, gain="linear", relevance_level=relevance_level, judged_only=True)
    res = pytrec(qd, rd, measures, relevance_level=relevance_level, judged_docs_only_flag=True)
    for family, name in [("precision", "P"), ("recall", "recall"), ("ndcg", "ndcg_cut"), ("map", "map_cut")]:
        for k in CUTS:
            theirs = column(res, n_q, f"{name}_{k}")
            assert np.abs(cond.at_k[family][:, k - 1] - theirs)[mask].max() <= 1e-9, (family, k)
        # condensing changes the numbers: the test could fail
        assert not np.allclose(cond.at_k[family][mask, 9], ev.at_k[family][mask, 9])
    for ours, name in [("mrr", "recip_rank"), ("map", "map"), ("bpref", "bpref")]:
        assert np.abs(cond.full[ours] - column(res, n_q, name))[mask].max() <= 1e-9, name


def test_judged_at_k_equals_ir_measures():
    import ir_measures
    qrels, ranking, scores = incomplete_collection(seed=3, n_q=300, low=0)  # ir_measures counts -1 as judged
    qd, rd = as_dicts(qrels, ranking, scores)
    ev = evaluate(ranking, qrels, k_max=120)
    ks = (1, 3, 5, 10, 20, 50, 100, 120)  # 120: beyond every ranking
    theirs = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(
        [ir_measures.Judged @ k for k in ks], qd, rd)}
    lengths = (ranking >= 0).sum(axis=1)
    assert (lengths < 100).any() and len(set(lengths.tolist())) > 50
    for k in ks:
        expected = np.array([theirs[(f"q{q}", f"Judged@{k}")] for q in range(len(ranking))])
        np.testing.assert_allclose(ev.at_k["judged"][:, k - 1], expected, rtol=0, atol=1e-15, err_msg=str(k))
    assert 0.05 < ev.at_k["judged"][:, 9].mean() < 0.5


def test_negative_grades_are_unjudged_unlike_ir_measures():
    """The one documented difference: a grade < 0 (trec_eval: pooled, not judged) is unjudged."""
    import ir_measures
    ev = evaluate(HAND_RANKING, HAND, k_max=3)
    qd = {"q0": {"d0": 2, "d1": 0, "d2": -1, "d3": 1, "d9": 0}}
    rd = {"q0": {"d0": 5.0, "d7": 4.0, "d2": 3.0, "d1": 2.0, "d3": 1.0}}
    (theirs,) = ir_measures.iter_calc([ir_measures.Judged @ 3], qd, rd)
    assert ev.at_k["judged"][0, 2] == pytest.approx(1 / 3) and theirs.value == pytest.approx(2 / 3)


# ----------------------------------------------------------------- real collections


def _real_ranking(collection, depth: int = 100):
    from retrievers.bm25 import BM25Retriever

    retriever = BM25Retriever()
    retriever.index(collection.doc_ids, collection.doc_texts)
    return retriever.search(collection.query_ids, collection.query_texts, min(depth, collection.n_docs))


def _check_against_oracles(collection, relevance_level: int):
    ranking = _real_ranking(collection)
    docs = np.asarray(collection.doc_ids, dtype=object)
    qd: dict[str, dict[str, int]] = {}
    for q, d, g in zip(collection.qrels.query_idx.tolist(), collection.qrels.doc_idx.tolist(),
                       collection.qrels.grade.tolist()):
        if d >= 0:  # pytrec_eval counts judged documents missing from the corpus the same way; keep it simple
            qd.setdefault(collection.query_ids[q], {})[docs[d]] = g
    rd = {collection.query_ids[q]: {docs[d]: float(-r) for r, d in enumerate(row.tolist()) if d >= 0}
          for q, row in enumerate(ranking.doc_idx)}  # scores that keep our order (no ties)
    keep = [q for q in range(collection.n_queries) if collection.query_ids[q] in qd]
    known = collection.qrels.doc_idx >= 0
    qrels = Qrels(collection.qrels.query_idx[known], collection.qrels.doc_idx[known], collection.qrels.grade[known])
    ev = evaluate(ranking.doc_idx, qrels, 100, gain="linear", relevance_level=relevance_level)
    cond = evaluate(ranking.doc_idx, qrels, 100, gain="linear", relevance_level=relevance_level, judged_only=True)
    ids = collection.query_ids
    res = pytrec(qd, rd, {"bpref"}, relevance_level=relevance_level)
    mask = ev.evaluated[keep]
    assert np.abs(ev.full["bpref"][keep] - [res[ids[q]]["bpref"] for q in keep])[mask].max() <= 1e-12
    res = pytrec(qd, rd, {"P.5,10", "recall.10,100", "ndcg_cut.10", "map", "bpref"}, relevance_level=relevance_level,
                 judged_docs_only_flag=True)
    for ours, k, name in [("precision", 5, "P_5"), ("precision", 10, "P_10"), ("recall", 10, "recall_10"),
                          ("recall", 100, "recall_100"), ("ndcg", 10, "ndcg_cut_10")]:
        theirs = np.array([res[ids[q]][name] for q in keep])
        assert np.abs(cond.at_k[ours][keep, k - 1] - theirs)[mask].max() <= 1e-9, name
    for name in ("map", "bpref"):
        assert np.abs(cond.full[name][keep] - [res[ids[q]][name] for q in keep])[mask].max() <= 1e-9, name
    import ir_measures
    theirs = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(
        [ir_measures.Judged @ 10], qd, rd)}
    expected = np.array([theirs[(ids[q], "Judged@10")] for q in keep])
    assert np.abs(ev.at_k["judged"][keep, 9] - expected).max() <= 1e-15
    return ev


def test_sample_collection_equals_the_oracles():
    from pipeline.io.collection import load_sample

    collection = load_sample()
    assert (collection.qrels.grade == 0).any()  # judged non-relevant documents: N > 0
    for level in (1, 2):
        ev = _check_against_oracles(collection, level)
    assert ev.at_k["judged"][:, 9].mean() < 0.9  # the sample judges few documents per query


def test_cranfield_equals_the_oracles():
    path = DATA / "cranfield"
    if not path.is_dir():
        pytest.skip(f"real collection 'cranfield' not found at {path} (../shared/data is absent)")
    from pipeline.io.collection import load_beir

    collection = load_beir(path)
    for level in (1, 3):  # Cranfield grades are 1..4: N = 0 at level 1, grades 1-2 are non-relevant at 3
        _check_against_oracles(collection, level)


# ----------------------------------------------------------------- the scorer and a run

QRELS = "q1 0 d1 2\nq1 0 d2 0\nq1 0 d3 1\nq1 0 d4 -1\nq2 0 d9 1\n"
RUN = "q1 Q0 d2 1 9.5 t\nq1 Q0 d7 2 9.0 t\nq1 Q0 d4 3 8.5 t\nq1 Q0 d1 4 8.0 t\nq1 Q0 d3 5 7.0 t\nq2 Q0 d9 1 1 t\n"


def test_scorer_reports_judged_and_bpref_and_takes_judged_only(tmp_path, capsys):
    from pipeline.cli.score import main

    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels.write_text(QRELS)
    run.write_text(RUN)
    qd = {"q1": {"d1": 2, "d2": 0, "d3": 1, "d4": -1}, "q2": {"d9": 1}}
    rd = {"q1": {"d2": 9.5, "d7": 9.0, "d4": 8.5, "d1": 8.0, "d3": 7.0}, "q2": {"d9": 1.0}}
    for flag in (False, True):
        assert main([str(qrels), str(run), "--k", "1,3,10", "--json", "--gain", "linear"]
                    + (["--judged-only"] if flag else [])) == 0
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        res = pytrec(qd, rd, {"bpref", "P_3", "map", "ndcg_cut_3"}, judged_docs_only_flag=flag)
        assert out["judged_only"] is flag
        assert out["bpref"] == pytest.approx(np.mean([res[q]["bpref"] for q in res]), abs=1e-15)
        assert out["precision_at_3"] == pytest.approx(np.mean([res[q]["P_3"] for q in res]), abs=1e-15)
        assert out["map"] == pytest.approx(np.mean([res[q]["map"] for q in res]), abs=1e-15)
        assert out["ndcg_at_3"] == pytest.approx(np.mean([res[q]["ndcg_cut_3"] for q in res]), abs=1e-12)
        # judged: q1 d2 . . d1 d3 (d4 is pooled, not judged); q2 d9 (one document retrieved)
        assert out["judged_at_3"] == pytest.approx((1 / 3 + 1) / 2) and out["judged_at_10"] == pytest.approx((3 / 5 + 1) / 2)
        assert "judged_at_10 = 0.8000 < 0.9" in captured.err and "pool it" in captured.err
        assert ("condensed lists" in captured.err) is flag
    assert main([str(qrels), str(run), "--k", "1,5", "--judged-only"]) == 0
    text = capsys.readouterr().out
    assert "judged " in text and "bpref " in text and "judged_only: condensed lists" in text


def test_a_run_records_judged_only_and_warns(tmp_path, capsys, monkeypatch):
    from hydra import compose, initialize_config_dir

    from pipeline.job import run

    overrides = ["tracking=none", f"paths.root={tmp_path}", "judged_only=true", "objective=bpref"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    monkeypatch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)  # not checked here
    objective = run(cfg)
    out = capsys.readouterr().out
    (results,) = list((tmp_path / "runs").glob("*/*/results"))
    metrics = json.loads((results / "metrics.json").read_text())
    record = json.loads((results / "record.json").read_text())
    assert metrics["judged_only"] is True and record["tags"]["judged_only"] == "true"
    assert record["params"]["judged_only"] == "True"
    assert objective == metrics["metrics"]["bpref"] and "bpref_ci_low" in metrics["metrics"]
    assert "judged_at_10" in metrics["metrics"] and "judged" in metrics["curves"]
    assert "curve/judged" in record["curves"]
    assert "This run scored condensed lists" in (results / "definition_card.md").read_text()
    assert "judged_only: condensed lists" in out
    assert f"judged_at_10 = {metrics['metrics']['judged_at_10']:.4f} < 0.9" in out and "pool it" in out


def test_the_judged_warning_is_shown_once_and_kept_in_the_job_log(tmp_path):
    """The job in this process (tests/commands.py): its console output and its log file."""
    from commands import run_job_command

    run_dir = tmp_path / "run"
    proc = run_job_command("tracking=none", f"paths.root={tmp_path / 'out'}", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    judged = json.loads((run_dir / "results" / "metrics.json").read_text())["metrics"]["judged_at_10"]
    line = f"judged_at_10 = {judged:.4f} < 0.9"  # the sample's pool is shallow: 0.1885
    assert (proc.stdout + proc.stderr).count(line) == 1
    logged = [entry for entry in (run_dir / "pipeline.log").read_text().splitlines() if line in entry]
    assert len(logged) == 1 and "[WARNING]" in logged[0]
