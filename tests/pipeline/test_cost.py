"""Cost metrics (issue 36): percentile bootstrap CIs against scipy, the summary of latencies,
the ranking cache carrying the latency it was measured with."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from pipeline.stats.percentile import percentiles_with_ci


@pytest.mark.parametrize("q", [50.0, 95.0, 99.0])
def test_percentile_ci_equals_scipy_bootstrap(q):
    x = np.random.default_rng(3).lognormal(1.0, 0.5, 257)
    ours = percentiles_with_ci(x, [q], n_resamples=999, seed=11)[q]
    theirs = scipy.stats.bootstrap((x,), lambda s, axis: np.percentile(s, q, axis=axis), n_resamples=999,
                                   method="percentile", rng=np.random.default_rng(11), vectorized=True)
    assert ours[0] == pytest.approx(np.percentile(x, q), rel=1e-12)
    assert ours[1] == pytest.approx(theirs.confidence_interval.low, rel=1e-12)
    assert ours[2] == pytest.approx(theirs.confidence_interval.high, rel=1e-12)


def test_equal_values_have_a_point_interval():
    assert percentiles_with_ci(np.full(40, 2.5), [50, 95]) == {50.0: (2.5, 2.5, 2.5), 95.0: (2.5, 2.5, 2.5)}
    with pytest.raises(ValueError):
        percentiles_with_ci([], [50])


# --------------------------------------------------------------------------- measuring a retriever

import time  # noqa: E402

from omegaconf import OmegaConf  # noqa: E402

from pipeline import config, stages  # noqa: E402
from pipeline.errors import InputError  # noqa: E402
from pipeline.io.cache import load_or_compute_ranking_arrays  # noqa: E402
from retrievers import cost  # noqa: E402
from pipeline.ranking import Ranking  # noqa: E402


class Sleeper:
    """Searches every query in one call that sleeps ``per_query`` seconds a query."""

    def __init__(self, per_query: float = 0.002, measured: bool = True):
        self.per_query, self.calls = per_query, []
        if not measured:
            self.latency_measured = False

    def index(self, doc_ids, doc_texts):
        time.sleep(0.01)

    def index_size(self):
        return {"memory_bytes": 3 * 2**20}

    def search(self, query_ids, query_texts, depth):
        self.calls.append(list(query_ids))
        time.sleep(self.per_query * len(query_ids))
        return Ranking.empty(len(query_ids), depth)


def test_a_batch_is_timed_around_the_call_and_shared_per_query_after_a_warmup():
    retriever = Sleeper()
    ids = [f"q{i}" for i in range(20)]
    ranking, info = cost.measured_search(retriever, ids, ids, 3, cost.CostSettings(warmup=4, repeat=2))
    assert retriever.calls[0] == [f"__warmup_{i}" for i in range(4)] and retriever.calls[1:] == [ids, ids]
    assert ranking.n_queries == 20 and info["latency_mode"] == "batch_share" and info["latency_source"] == "measured"
    m = info["metrics"]
    assert m["latency_p50_ms"] == pytest.approx(2.0, rel=0.5) and m["latency_p50_ms"] >= 2.0
    assert m["throughput_qps"] == pytest.approx(1000 / m["latency_mean_ms"], rel=1e-6)  # one batch a pass
    assert info["timed_queries"] == 40 and info["warmup"] == 4 and info["repeat"] == 2
    assert {"cpu", "cores", "usable_cores", "threads"} <= set(info["machine"])
    built = cost.measured_index(retriever, ["d"], ["t"])
    assert built["index_build_s"] >= 0.01 and built["index_memory_mb"] == 3.0


def test_user_code_warms_up_on_real_queries_and_a_failed_warmup_is_not_fatal():
    class UserCode(Sleeper):
        warmup_real_queries = True

        def search(self, query_ids, query_texts, depth):
            if len(self.calls) == 0 and query_texts[0] != "t0":
                raise KeyError(query_texts[0])
            return super().search(query_ids, query_texts, depth)

    retriever = UserCode(per_query=0.0)
    ids = [f"q{i}" for i in range(6)]
    texts = [f"t{i}" for i in range(6)]
    _, info = cost.measured_search(retriever, ids, texts, 3, cost.CostSettings(warmup=2))
    assert retriever.calls == [ids[:2], ids] and info["warmup"] == 2
    bundled = Sleeper(per_query=0.0)
    bundled.search = lambda *args: (_ for _ in ()).throw(KeyError("no"))  # every search fails
    assert cost.warm_up(bundled, ids, texts, 3, 2) == 0


def test_per_query_mode_times_each_query_alone_and_keeps_the_batch_ranking():
    class Ranker(Sleeper):
        """Sleeps 10 ms for even queries, 40 ms for odd ones; doc i+1 then i for query qi."""

        def search(self, query_ids, query_texts, depth):
            self.calls.append(list(query_ids))
            time.sleep(sum(0.040 if int(q[1:]) % 2 else 0.010 for q in query_ids if q.startswith("q")))
            rows = [[int(q[1:]) + 1, int(q[1:])] if q.startswith("q") else [0, 1] for q in query_ids]
            return Ranking(np.array(rows, np.int64), np.tile(np.array([2.0, 1.0], np.float32), (len(rows), 1)))

    ids = [f"q{i}" for i in range(10)]
    batch, _ = cost.measured_search(Ranker(), ids, ids, 2, cost.CostSettings(warmup=0))
    retriever = Ranker()
    ranking, info = cost.measured_search(retriever, ids, ids, 2, cost.CostSettings(warmup=0, per_query=True,
                                                                                   repeat=2))
    assert retriever.calls == [[q] for q in ids] * 2  # one call per query, each pass
    np.testing.assert_array_equal(ranking.doc_idx, batch.doc_idx)
    assert ranking.scores.dtype == np.float32 and info["latency_mode"] == "per_query"
    times = np.array(info[cost.PER_QUERY_KEY])  # each query's own time (the mean of 2 passes), in order
    assert times.shape == (10,) and np.all(times[0::2] >= 10.0) and np.all(times[1::2] >= 40.0)
    # a loaded machine oversleeps both alike: their difference is the 30 ms the odd ones sleep longer
    assert np.median(times[1::2]) - np.median(times[0::2]) == pytest.approx(30.0, rel=0.2)
    assert cost.PER_QUERY_KEY not in cost.block(info) and cost.block(info)["metrics"] == info["metrics"]
    # the batch mode keeps each query's share too (every query the same)
    assert len(set(batch_info := cost.measured_search(Ranker(), ids, ids, 2, cost.CostSettings(warmup=0))[1][
        cost.PER_QUERY_KEY])) == 1 and len(batch_info) == 10


def test_a_retriever_that_retrieves_nothing_is_not_measured_and_says_so():
    retriever = Sleeper(measured=False)
    _, info = cost.measured_search(retriever, ["q"], ["t"], 3, cost.CostSettings())
    assert info["latency_source"] == "not measured" and "metrics" not in info and len(retriever.calls) == 1
    assert cost.describe(info) == "latency not measured (a run file: ranked elsewhere)"


def test_the_cached_ranking_keeps_the_latency_it_was_measured_with(tmp_path):
    key = {"collection": "c", "retriever": {"r": 1}, "depth": 2}
    ranking = (np.array([[0, 1]]), np.array([[2.0, 1.0]], np.float32))
    kept: dict = {}

    def compute():
        kept["cost"] = {"latency_source": "measured", "metrics": {"latency_p50_ms": 4.5}}
        return ranking

    _, hit = load_or_compute_ranking_arrays(tmp_path, key, compute, extra=kept)
    again: dict = {}
    _, hit_again = load_or_compute_ranking_arrays(tmp_path, key, compute, extra=again)
    assert (hit, hit_again) == (False, True) and again == kept
    on_hit = stages.cached_cost(again["cost"])
    assert on_hit["latency_source"] == "cache" and on_hit["metrics"]["latency_p50_ms"] == 4.5
    # an entry written before cost metrics: no number at all, never 0
    old = stages.cached_cost(None)
    assert old["latency_source"] == "not measured" and "metrics" not in old
    assert cost.describe(old) == "latency not measured (the cached ranking predates cost metrics)"


def test_the_console_line():
    info = {"latency_source": "cache", "latency_mode": "batch_share",
            "metrics": {"latency_p50_ms": 2.14, "latency_p95_ms": 3.4, "throughput_qps": 410.2}}
    assert cost.describe(info) == ("latency p50/p95 2.14/3.4 ms (per-query share of batches), 410 queries/s "
                                   "(measured when the cached ranking was computed)")


def test_faiss_and_bm25_index_sizes():
    import faiss

    from pipeline.io.collection import load_sample
    from retrievers.bm25 import BM25Retriever

    x = np.random.default_rng(0).random((500, 16), dtype=np.float32)
    for index in (faiss.IndexFlatIP(16), faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT)):
        index.add(x)
        assert cost.faiss_bytes(index) == pytest.approx(len(faiss.serialize_index(index)), rel=0.01)
    sample = load_sample()
    bm25 = BM25Retriever()
    bm25.index(sample.doc_ids, sample.doc_texts)
    matrix = bm25.weights.matrix
    at_least = matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes
    assert at_least < bm25.index_size()["memory_bytes"] < 2 * at_least


@pytest.mark.parametrize("block, problem", [({"warmup": -1}, "cost.warmup"), ({"repeat": 0}, "cost.repeat")])
def test_bad_cost_settings_are_one_line(block, problem):
    with pytest.raises(InputError, match=problem):
        config.cost_settings(OmegaConf.create({"cost": block}))
    assert config.cost_settings(OmegaConf.create({})) == cost.CostSettings()


# --------------------------------------------------------------------------- a job, its record and MLflow run


@pytest.mark.slow
def test_a_job_logs_its_cost_as_mlflow_metrics_and_tags_apart_from_quality(tmp_path, store, capsys):
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from mlflow import MlflowClient

    from pipeline import tracking
    from pipeline.job import run
    from pipeline.tracking.view import headline_columns

    repo = Path(__file__).resolve().parents[2]
    with initialize_config_dir(config_dir=str(repo / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["tracking=none", f"paths.root={tmp_path}", "cost.repeat=2"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pipeline.figures.save_run_figures", lambda *args, **kwargs: None)
        run(cfg)
    assert "(per-query share of batches)" in capsys.readouterr().out
    (results,) = tmp_path.glob("runs/*/*/results")
    import json

    record = json.loads((results / "record.json").read_text())
    assert record["params"]["cost.repeat"] == "2" and record["cost"]["timed_queries"] == 2 * 52
    assert not any(key.startswith(("latency_", "throughput_", "index_")) for key in record["metrics"])
    run_id = tracking.log_results(results, tracking.StoreSettings(uri=store,
                                                                  artifact_root=str(Path(store[10:]).parent)))
    logged = MlflowClient(tracking_uri=store).get_run(run_id).data
    for key, value in record["cost"]["metrics"].items():
        assert logged.metrics[key] == pytest.approx(value, rel=1e-12), key
    assert logged.tags["cost.latency_mode"] == "batch_share" and logged.tags["cost.latency_source"] == "measured"
    assert logged.tags["cost.machine.cores"].isdigit()
    columns = headline_columns("ndcg_at_10")
    assert columns.index("metrics.`latency_p95_ms`") == columns.index("metrics.`ndcg_at_10_ci_high`") + 1


def test_a_damaged_cost_metric_in_a_record_names_its_key(tmp_path):
    from pipeline.io import results as res

    record = {"metrics": {}, "curves": {}, "params": {}, "tags": {}, "cost": {"metrics": {"latency_p50_ms": "x"}}}
    with pytest.raises(InputError, match="cost metrics key 'latency_p50_ms' is not a number"):
        res.check_numbers(record, tmp_path / "record.json")
