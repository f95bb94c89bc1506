"""BM25: every score against bm25s and rank_bm25 configured to the same formula.

The corpus is generated here: a few hundred documents over a vocabulary with stop words,
inflected forms that stem together, upper case, punctuation and one-letter tokens.
"""

from __future__ import annotations


import numpy as np
import pytest

from pipeline.ranking import Ranking
from retrievers.bm25 import VARIANTS, Analyzer, BM25Retriever

K1, B, DELTA = 1.3, 0.7, 0.8

WORDS = (
    "run runs running runner jump jumped jumping fox foxes dog dogs lazy quick quickly brown "
    "wing wings winged flow flows flowing laminar turbulent boundary layer layers shock wave "
    "waves pressure pressures heat heated heating plate plates cone cones body bodies drag lift "
    "Mach number numbers supersonic hypersonic theory theoretical experiment experimental"
).split()
STOP = "the a of and in to is it that with as for on by an be".split()


def make_corpus(n_docs: int = 300, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        n = int(rng.integers(3, 60))
        words = rng.choice(WORDS + STOP + ["x", "7", "A"], size=n)
        text = " ".join(w.upper() if rng.random() < 0.05 else w for w in words)
        docs.append(text.replace(" ", ", ", 1) + ".")
    docs[5] = docs[4]  # an exact duplicate: ties broken by document index
    docs[9] = "the of and a"  # only stop words: an empty document
    return docs


QUERIES = [
    "quick brown fox",
    "running runner runs",  # one stem, repeated
    "Mach number Mach",  # a repeated term
    "boundary layer heat transfer on a flat plate",  # unknown terms mixed in
    "zeppelin",  # no known term
    "the of and",  # only stop words
    "",  # empty
    "wing wings shock",
]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus()


@pytest.fixture(params=["dense", "sparse"])
def ranking_path(request, monkeypatch) -> str:
    """search() ranks a small corpus through one dense [queries, documents] matrix and a large
    one query by query over its hits (``sparse_top_min_docs``): both must give the same ranking."""
    monkeypatch.setattr(BM25Retriever, "sparse_top_min_docs", 10**9 if request.param == "dense" else 0)
    return request.param


def bm25s_tokens(texts: list[str]) -> list[list[str]]:
    import bm25s
    import Stemmer

    return bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False, show_progress=False)


def test_analyzer_tokenizes_like_bm25s(corpus):
    assert Analyzer("en", "english").analyze(corpus + QUERIES) == bm25s_tokens(corpus + QUERIES)


@pytest.mark.parametrize("method", sorted(VARIANTS))
def test_every_score_equals_bm25s(corpus, method):
    import bm25s

    ours = BM25Retriever(k1=K1, b=B, method=method, delta=DELTA)
    ours.index([str(i) for i in range(len(corpus))], corpus)
    theirs = bm25s.BM25(k1=K1, b=B, delta=DELTA, method=method)
    theirs.index(bm25s_tokens(corpus), show_progress=False)
    got = ours.score_matrix(QUERIES)
    assert got.shape == (len(QUERIES), len(corpus))
    for row, tokens in zip(got, bm25s_tokens(QUERIES)):
        known = [t for t in tokens if t in theirs.vocab_dict]
        if not known:  # bm25s cannot score an empty query; every score is 0
            np.testing.assert_array_equal(row, 0.0)
            continue
        expected = theirs.get_scores(known)
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-6)


def make_plain_corpus(n_docs: int = 400, n_words: int = 500, seed: int = 3) -> list[str]:
    """Words w0..w499 with Zipf-like frequencies; no term is in half the documents."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_words + 1) ** 0.5
    p /= p.sum()
    return [" ".join(f"w{i}" for i in rng.choice(n_words, size=int(rng.integers(1, 40)), p=p)) for _ in range(n_docs)]


PLAIN_QUERIES = ["w0 w1", "w3 w3 w17", "w250 w499 w7", "w600", "w2 w5 w9 w11 w13 w40"]


@pytest.mark.parametrize("method", ["robertson", "bm25+"])
def test_every_score_equals_rank_bm25(method):
    """rank_bm25's BM25Okapi is (k1 + 1) x bm25s's Robertson (same idf, the tf part times
    k1 + 1) as long as no idf is negative: rank_bm25 floors those at epsilon x mean idf,
    bm25s at 0, so the corpus keeps every term in under half the documents. BM25Plus is
    the same formula. (rank_bm25 0.2.2's BM25L multiplies by tf once more, so a document
    without the term scores 0: not Lv & Zhai's BM25L, and not compared.)"""
    import rank_bm25

    corpus = make_plain_corpus()
    tokens = [doc.split() for doc in corpus]
    df = {}
    for doc in tokens:
        for t in set(doc):
            df[t] = df.get(t, 0) + 1
    assert max(df.values()) < len(corpus) / 2
    if method == "robertson":
        model, factor = rank_bm25.BM25Okapi(tokens, k1=K1, b=B), K1 + 1
    else:
        model, factor = rank_bm25.BM25Plus(tokens, k1=K1, b=B, delta=DELTA), 1.0
    ours = BM25Retriever(k1=K1, b=B, method=method, delta=DELTA, stopwords=None, stemmer=None)
    ours.index([str(i) for i in range(len(corpus))], corpus)
    got = ours.score_matrix(PLAIN_QUERIES)
    for row, query in zip(got, PLAIN_QUERIES):
        expected = model.get_scores(query.split()) / factor
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(got[:3]).min() >= 0 and got[:3].max() > 1.0
    assert (got[3] == 0).all()  # an unknown term scores nothing


def brute_force(ours: BM25Retriever, corpus: list[str], queries: list[str], depth: int) -> Ranking:
    """Score desc then index asc over the documents sharing a term with the query."""
    analyzer = Analyzer("en", "english")
    doc_terms = [set(t) for t in analyzer.analyze(corpus)]
    scores = ours.score_matrix(queries)
    idx = np.full((len(queries), depth), -1, np.int64)
    val = np.full((len(queries), depth), -np.inf, np.float32)
    for i, q_terms in enumerate(analyzer.analyze(queries)):
        hits = [d for d, terms in enumerate(doc_terms) if terms & set(q_terms)]
        hits.sort(key=lambda d: (-scores[i, d], d))
        hits = hits[:depth]
        idx[i, : len(hits)] = hits
        val[i, : len(hits)] = scores[i, hits]
    return Ranking(idx, val)


@pytest.mark.parametrize("method", sorted(VARIANTS))
@pytest.mark.parametrize("depth", [1, 10, 400])
def test_search_is_score_desc_index_asc_over_matching_documents(corpus, method, depth, ranking_path):
    ours = BM25Retriever(k1=K1, b=B, method=method, delta=DELTA)
    ours.index([str(i) for i in range(len(corpus))], corpus)
    got = ours.search([str(i) for i in range(len(QUERIES))], QUERIES, depth)
    want = brute_force(ours, corpus, QUERIES, depth)
    np.testing.assert_array_equal(got.doc_idx, want.doc_idx)
    np.testing.assert_array_equal(got.scores, want.scores)
    assert got.doc_idx.dtype == np.int64 and got.scores.dtype == np.float32
    # queries 4-6 have no known term: empty rows even where BM25L/BM25+ score every document
    assert (got.doc_idx[4:7] == -1).all() and np.isneginf(got.scores[4:7]).all()


def test_duplicate_documents_tie_lower_index_first(corpus, ranking_path):
    ours = BM25Retriever()
    ours.index([str(i) for i in range(len(corpus))], corpus)
    ranking = ours.search(["q"], [corpus[4]], 3)  # documents 4 and 5 are identical
    assert ranking.scores[0, 0] == ranking.scores[0, 1]
    assert ranking.doc_idx[0, :2].tolist() == [4, 5]


def test_hit_rule_on_a_tiny_corpus(ranking_path):
    docs = ["alpha beta", "alpha gamma", "alpha delta", "epsilon"]
    ours = BM25Retriever(method="robertson", stopwords=None, stemmer=None)
    ours.index(["a", "b", "c", "d"], docs)
    ranking = ours.search(["q1", "q2", "q3"], ["alpha", "gamma gamma", "epsilon beta"], 4)
    # "alpha" is in 3 of 4 documents: Robertson's idf is floored at 0, yet all 3 are hits
    assert ranking.doc_idx[0].tolist() == [0, 1, 2, -1]
    assert ranking.scores[0, :3].tolist() == [0.0, 0.0, 0.0]
    assert ranking.doc_idx[1].tolist() == [1, -1, -1, -1]
    # idf(t) = log((4 - 1 + .5) / (1 + .5)); tf part = 1 / (1 + k1 (1 - b + b dl/avgdl)), dl = 2 or 1
    idf = np.log(3.5 / 1.5)
    avgdl = 7 / 4
    tf_part = lambda dl: 1 / (1 + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))  # noqa: E731
    assert ranking.scores[1, 0] == pytest.approx(2 * idf * tf_part(2), rel=1e-6)  # query term twice
    assert ranking.doc_idx[2].tolist() == [3, 0, -1, -1]
    assert ranking.scores[2, :2] == pytest.approx([idf * tf_part(1), idf * tf_part(2)], rel=1e-6)


def test_bm25plus_returns_only_matching_documents(ranking_path):
    docs = ["alpha beta", "gamma", "delta"]
    ours = BM25Retriever(method="bm25+", stopwords=None, stemmer=None, delta=1.0)
    ours.index(["a", "b", "c"], docs)
    full = ours.score_matrix(["alpha"])
    assert (full > 0).all()  # BM25+ gives every document a positive score...
    ranking = ours.search(["q"], ["alpha"], 3)
    assert ranking.doc_idx[0].tolist() == [0, -1, -1]  # ...but only document 0 contains "alpha"
    assert ranking.scores[0, 0] == pytest.approx(full[0, 0])


def test_stopwords_list_and_no_stemmer(ranking_path):
    docs = ["cats and dogs", "cat", "dogs"]
    ours = BM25Retriever(stopwords=["dogs"], stemmer=None)
    ours.index(["a", "b", "c"], docs)
    ranking = ours.search(["q1", "q2"], ["dogs", "cats and"], 3)
    assert ranking.doc_idx[0].tolist() == [-1, -1, -1]  # "dogs" is a stop word here
    assert ranking.doc_idx[1].tolist() == [0, -1, -1]  # "cats" not stemmed to "cat"; "and" kept
    stemmed = BM25Retriever(stopwords=["dogs"], stemmer="english")
    stemmed.index(["a", "b", "c"], docs)
    assert stemmed.search(["q"], ["cats"], 3).doc_idx[0].tolist() == [1, 0, -1]


def test_cache_key_names_every_setting():
    base = BM25Retriever().cache_key()
    assert base == {
        "retriever": "bm25", "k1": 1.2, "b": 0.75, "method": "lucene", "delta": None,
        "stopwords": "en", "stemmer": "english", "token_pattern": r"(?u)\b\w\w+\b",
    }
    assert BM25Retriever(delta=2.0).cache_key() == base  # delta is unused by lucene
    assert BM25Retriever(method="bm25l", delta=2.0).cache_key()["delta"] == 2.0
    assert BM25Retriever(stopwords=["b", "a"]).cache_key()["stopwords"] == ["a", "b"]
    assert BM25Retriever(k1=1).cache_key()["k1"] == 1.0 and isinstance(BM25Retriever(k1=1).k1, float)


def test_bad_settings_and_order_of_calls():
    with pytest.raises(ValueError, match="unknown BM25 method"):
        BM25Retriever(method="okapi")
    with pytest.raises(ValueError, match="unknown stemmer"):
        BM25Retriever(stemmer="klingon")
    with pytest.raises(RuntimeError, match="index"):
        BM25Retriever().search(["q"], ["x"], 1)


def test_empty_corpus_and_no_queries():
    ours = BM25Retriever()
    ours.index([], [])
    r = ours.search(["q"], ["anything"], 2)
    assert r.doc_idx.tolist() == [[-1, -1]]
    ours.index(["a"], ["word"])
    assert ours.search([], [], 5).doc_idx.shape == (0, 5)


def test_named_stop_word_lists_are_bm25s_lists():
    """The vendored lists (retrievers/bm25/stopwords.json) are bm25s's, under every name bm25s knows."""
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_GERMAN
    from bm25s.tokenization import _infer_stopwords

    from retrievers.bm25 import resolve_stopwords, stopword_lists

    aliases, lists = stopword_lists()
    assert len(lists) == 15
    for name in [*aliases, *lists]:
        assert resolve_stopwords(name) == (name, frozenset(_infer_stopwords(name))), name
    assert resolve_stopwords("en") == ("en", frozenset(STOPWORDS_EN))
    assert resolve_stopwords("english") == ("english", frozenset(STOPWORDS_EN))
    assert resolve_stopwords("de") == ("de", frozenset(STOPWORDS_GERMAN))
    assert resolve_stopwords(None) == (None, frozenset())
    with pytest.raises(ValueError, match="unknown stop word list 'klingon'"):
        resolve_stopwords("klingon")


@pytest.mark.parametrize("method", ["lucene", "robertson", "bm25+"])
def test_batched_indexing_builds_the_same_index_as_one_batch(corpus, method, monkeypatch):
    """index() tokenizes a batch of documents at a time and renumbers terms at the end; the
    index must not depend on where the batches split (stems and stop words first seen in
    different batches, an all-stop-word document, an empty one)."""
    docs = list(corpus) + ["", "Running RUNS run", "the a of"]
    whole = BM25Retriever(k1=K1, b=B, method=method, delta=DELTA)
    whole.index([str(i) for i in range(len(docs))], docs)
    for batch in (1, 7, 64):
        monkeypatch.setattr(BM25Retriever, "index_batch", batch)
        part = BM25Retriever(k1=K1, b=B, method=method, delta=DELTA)
        part.index([str(i) for i in range(len(docs))], docs)
        assert part.weights.vocabulary == whole.weights.vocabulary
        assert (part.weights.matrix != whole.weights.matrix).nnz == 0 and part.weights.matrix.has_canonical_format
        np.testing.assert_array_equal(part.weights.matrix.indptr, whole.weights.matrix.indptr)
        np.testing.assert_array_equal(part.weights.matrix.indices, whole.weights.matrix.indices)
        np.testing.assert_array_equal(part.weights.matrix.data, whole.weights.matrix.data)
    # term ids are the order of the sorted tokens: a term's id is the rank of its smallest token
    analyzer = whole.analyzer
    tokens = sorted({t for toks in analyzer.split(docs) for t in toks})
    first_token = {}
    for token, term in analyzer.terms_of(tokens).items():
        if term is not None:
            first_token.setdefault(whole.weights.vocabulary[term], token)
    vocab = whole.weights.vocabulary
    ranks = [first_token[i] for i in range(len(vocab)) if i in first_token]
    assert ranks == sorted(ranks) and len(ranks) == len(vocab)


def test_postings_kept_in_memory_when_no_temporary_file_can_be_written(corpus, monkeypatch, caplog):
    """index() spills each batch's postings to an unnamed temporary file; a full disk (no
    file) must give the same index, with a warning."""
    import tempfile

    ids = [str(i) for i in range(len(corpus))]
    spilled = BM25Retriever()
    spilled.index(ids, corpus)

    def no_file(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_file)
    monkeypatch.setattr(BM25Retriever, "index_batch", 64)
    with caplog.at_level("WARNING", logger="retrievers.bm25"):
        held = BM25Retriever()
        held.index(ids, corpus)
    assert "cannot spill postings" in caplog.text and "No space left" in caplog.text
    assert held.weights.vocabulary == spilled.weights.vocabulary
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(held.weights.matrix, part), getattr(spilled.weights.matrix, part))


def test_vocabulary_lookups():
    from retrievers.bm25 import Vocabulary

    terms = ["zeta", "alpha", "été", "\ud800x", "mid", ""]
    vocab = Vocabulary(terms, [4, 0, 2, 5, 1, 3])
    assert len(vocab) == 6
    assert [vocab.get(t, -9) for t in terms] == [4, 0, 2, 5, 1, 3]
    assert vocab["été"] == 2 and vocab.get("et", -9) == -9 and vocab.get("zz", -9) == -9
    assert vocab.get("alph", -9) == -9 and vocab.get("alphaa", -9) == -9
    with pytest.raises(KeyError):
        vocab["nope"]
    assert dict(vocab.items()) == dict(zip(terms, [4, 0, 2, 5, 1, 3]))
    assert [t for t, _ in vocab.items()] == sorted(terms)  # UTF-8 byte order is code point order
    assert vocab == Vocabulary(list(reversed(terms)), [3, 1, 5, 2, 0, 4]) and vocab != Vocabulary(terms, [0] * 6)
    assert len(Vocabulary([], [])) == 0 and Vocabulary([], []).get("a", -1) == -1


def test_postings_a_full_temporary_file_refused_stay_in_memory(corpus, monkeypatch):
    """The temporary file opens but every write fails (a disk that fills up): the postings
    stay in memory; the index is the same."""
    import tempfile

    ids = [str(i) for i in range(len(corpus))]
    monkeypatch.setattr(BM25Retriever, "index_batch", 64)
    here = BM25Retriever(method="bm25+")
    here.index(ids, corpus)
    real = tempfile.TemporaryFile

    class Full:
        def __init__(self, *args, **kwargs):
            self._f = real(*args, **kwargs)

        def write(self, data):
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(self._f, name)

    monkeypatch.setattr(tempfile, "TemporaryFile", Full)
    apart = BM25Retriever(method="bm25+")
    apart.index(ids, corpus)
    assert apart.weights.vocabulary == here.weights.vocabulary
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(apart.weights.matrix, part), getattr(here.weights.matrix, part))


def test_a_corpus_changed_under_the_index_is_an_input_error(tmp_path):
    """Lazy texts read while indexing: a file changed since loading is the loader's InputError."""
    import json

    from pipeline.io.collection import load_beir
    from pipeline.errors import InputError

    (tmp_path / "qrels").mkdir()
    docs = [{"_id": f"d{i}", "title": "", "text": f"word{i % 7} text number {i}"} for i in range(50)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "word3"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
    collection = load_beir(tmp_path, lazy_texts=True)
    with (tmp_path / "corpus.jsonl").open("a") as fh:
        fh.write(json.dumps({"_id": "d50", "text": "late"}) + "\n")
    with pytest.raises(InputError, match="changed since it was loaded"):
        BM25Retriever().index(collection.doc_ids, collection.doc_texts)
