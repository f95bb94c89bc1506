"""The config cache (hydra_plugins/pipeline_config_cache, scheme ``pipelinecache://``): each
config file parsed once a process, and every composed config Hydra's own (issue 35).

Oracle: Hydra composing the same overrides with its own sources, the search path plugin
switched off for the comparison (``monkeypatch``: tests only, the code never patches Hydra).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

import pipeline.config  # noqa: F401  (the base_config schema)

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")

OVERRIDES = [
    [],
    ["k=3", "reorder=reverse"],
    ["retriever=dense", "reorder=lost_in_the_middle", "attention=u_shape"],
    ["retriever=hybrid", "chunker=tokens", "k=5", "budget=512"],
    ["dataset=beir", "dataset.path=/tmp/none", "tracking=none", "seed=3"],
    ["experiment=tune_bm25"],
    ["retriever=hybrid_convex", "attention=log", "reorder=attention_optimal", "judged_only=true"],
    ["hydra/sweeper=basic", "hydra.job.chdir=true", "chunker=sentences"],
]


def _cache_module():
    """The module Hydra's plugin scan executed (it may differ from an imported one)."""
    Plugins.instance()
    return sys.modules["hydra_plugins.pipeline_config_cache.config_cache"]


def _plugin_class():
    return next(p for p in Plugins.instance().discover(SearchPathPlugin) if p.__name__ == "ConfigCacheSearchPath")


def _composed(overrides: list[str], conf: str = CONF, config_name: str = "config") -> tuple[dict, list[str]]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
        sources = [f"{s.schema}://{s.path}" for s in cfg.hydra.runtime.config_sources]
        with_hydra = OmegaConf.to_container(cfg, resolve=False)
    del with_hydra["hydra"]["runtime"]["config_sources"]  # names the sources: the one place they differ
    return with_hydra, sources


@pytest.mark.slow  # 24 compositions: 3-7 s
def test_every_composed_config_is_hydras_own(monkeypatch):
    cache = _cache_module()
    cache.clear()
    cached = [_composed(o) for o in OVERRIDES]
    again = [_composed(o) for o in OVERRIDES]  # from the memo this time
    assert cache.memo_size() > 10
    assert all(s[:2] == ["pipelinecache://pkg://hydra.conf", f"pipelinecache://file://{CONF}"] for _, s in cached)
    monkeypatch.setattr(_plugin_class(), "manipulate_search_path", lambda self, search_path: None)
    own = [_composed(o) for o in OVERRIDES]
    assert all(s[:2] == ["pkg://hydra.conf", f"file://{CONF}"] for _, s in own)
    for overrides, (mine, _), (mine_again, _), (hydras, _) in zip(OVERRIDES, cached, again, own):
        assert mine == hydras, overrides
        assert mine_again == hydras, overrides
    GlobalHydra.instance().clear()


def test_a_loaded_config_changed_by_its_user_leaves_the_next_load_alone():
    cache = _cache_module()
    source = cache.CachedConfigSource("main", f"{cache.SCHEME}://file://{CONF}")
    first = source.load_config("config")
    expected = OmegaConf.to_container(first.config)
    assert "defaults" in expected and expected["k"] == 10
    del first.config["defaults"]  # Hydra deletes the defaults list from what it loads
    first.config.k = 99
    first.header["package"] = "elsewhere"
    second = source.load_config("config")
    assert OmegaConf.to_container(second.config) == expected
    assert second.header["package"] != "elsewhere"
    assert second.config is not source.load_config("config").config


def test_an_edited_file_is_parsed_again(tmp_path):
    cache = _cache_module()
    (tmp_path / "config.yaml").write_text("x: 1\ny: a\n")
    assert _composed([], str(tmp_path))[0]["x"] == 1
    assert _composed([], str(tmp_path))[0]["x"] == 1
    (tmp_path / "config.yaml").write_text("x: 2\ny: a\n")  # same size, maybe the same mtime tick
    assert _composed([], str(tmp_path))[0]["x"] == 2
    (tmp_path / "config.yaml").write_text("x: 30\ny: [1, 2]\n")
    assert _composed([], str(tmp_path))[0]["y"] == [1, 2]
    (tmp_path / "config.yaml").unlink()
    with pytest.raises(Exception, match="config"):
        _composed([], str(tmp_path))
    assert cache.scheme_of(str(tmp_path)) == "file"
    GlobalHydra.instance().clear()


def test_only_file_and_package_entries_are_wrapped():
    class SearchPath(ConfigSearchPath):
        def __init__(self, entries):
            from hydra.core.config_search_path import SearchPathElement

            self.entries = [SearchPathElement(p, s) for p, s in entries]

        def get_path(self):
            return self.entries

        def append(self, provider, path, anchor=None):
            raise AssertionError

        def prepend(self, provider, path, anchor=None):
            raise AssertionError

    path = SearchPath([("hydra", "pkg://hydra.conf"), ("main", "/abs/conf"), ("mine", "file://rel/conf"),
                       ("schema", "structured://")])
    _plugin_class()().manipulate_search_path(path)
    assert [(e.provider, e.path) for e in path.entries] == [
        ("hydra", "pipelinecache://pkg://hydra.conf"), ("main", "pipelinecache://file:///abs/conf"),
        ("mine", "pipelinecache://file://rel/conf"), ("schema", "structured://")]


@pytest.mark.slow
def test_cfg_job_and_info_still_work():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    job = subprocess.run([sys.executable, "-m", "pipeline", "--cfg", "job", "k=7", "reorder=reverse"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr
    printed = OmegaConf.create(job.stdout)
    assert printed.k == 7 and printed.reorder._target_ == "pipeline.context.placement.reverse"
    info = subprocess.run([sys.executable, "-m", "pipeline", "--info", "searchpath"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert f"pipelinecache://file://{ROOT / 'conf'}" in info.stdout


def test_a_file_loaded_once_keeps_no_copy_and_a_second_load_keeps_one(tmp_path):
    cache = _cache_module()
    cache.clear()
    (tmp_path / "config.yaml").write_text("x: 1\n")
    source = cache.CachedConfigSource("main", f"{cache.SCHEME}://file://{tmp_path}")
    assert source.load_config("config").config.x == 1 and cache.memo_size() == 0  # a single job: no copy
    assert source.load_config("config").config.x == 1 and cache.memo_size() == 1
    (tmp_path / "config.yaml").write_text("x: 2\n")
    assert source.load_config("config").config.x == 2 and cache.memo_size() == 0
