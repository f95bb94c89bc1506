"""A Hydra config source that parses each config file once a process (``pipelinecache://``).

``pipelinecache://<inner>`` wraps the source Hydra registers for ``<inner>``'s scheme
(``file:///abs/conf``, ``pkg://hydra.conf``): listing, ``is_config``, ``is_group`` and
``available`` are the inner source's. ``load_config`` reads the file's bytes (a read, no
parse) and, when they are the bytes it parsed before, returns a deep copy of that parse
(Hydra deletes ``defaults`` from what it loads and merges into it); otherwise the inner
source loads it, as Hydra would, and a copy is kept once the same bytes have been loaded
twice (a single job, which composes once, pays for no copy), if the file did not change
while it was read. A file that cannot be read as bytes is loaded by the inner source every time. The
memo lives in this module, not in the source: Hydra deep-copies its sources for every
composition.

:class:`ConfigCacheSearchPath` swaps the search path's ``file://`` and ``pkg://`` entries for
``pipelinecache://`` ones when Hydra builds the search path (once a process, before any
composition), keeping each entry's provider and place. The configs a job gets are Hydra's
own; only ``hydra.runtime.config_sources`` names the scheme ``pipelinecache`` with the
inner path (``file:///.../conf``). Entries added later through ``hydra.searchpath`` are read
by Hydra's own sources.
"""

# No ``from __future__ import annotations``: Hydra's plugin scan may execute this module a
# second time, outside the import system; annotations stay plain runtime values.
import copy
import os
import threading
from importlib import resources
from typing import Dict, List, Optional, Tuple

from hydra.core.config_search_path import ConfigSearchPath, SearchPathElement
from hydra.core.object_type import ObjectType
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

SCHEME = "pipelinecache"
#: The schemes of Hydra's sources that this one wraps (their files can be read as bytes).
WRAPPED = ("file", "pkg")

#: (inner source's full path, config path) -> (the file's bytes, a copy of the inner source's
#: result, None until the file has been loaded twice with these bytes)
_MEMO: Dict[Tuple[str, str], Tuple[bytes, Optional[ConfigResult]]] = {}
_LOCK = threading.Lock()


def clear() -> None:
    """Forget every parse kept (tests; a process that wants every file parsed again)."""
    with _LOCK:
        _MEMO.clear()


def memo_size() -> int:
    """How many parses are kept (tests, debugging)."""
    return sum(result is not None for _, result in _MEMO.values())


def scheme_of(path: str) -> str:
    """A search path entry's scheme (an entry without one is a folder: ``file``)."""
    return path.split("://", 1)[0] if "://" in path else "file"


def file_name(config_path: str) -> str:
    """The file a config path names (Hydra 1.2+ reads ``.yaml`` files only)."""
    return config_path if config_path.endswith(".yaml") else f"{config_path}.yaml"


def file_bytes(source: ConfigSource, config_path: str) -> Optional[bytes]:
    """The bytes of the file ``source`` (a file or package source) loads for
    ``config_path``; None when they cannot be read (then nothing is kept)."""
    name = file_name(config_path)
    try:
        if source.scheme() == "file":
            with open(os.path.realpath(os.path.join(source.path, name)), "rb") as f:
                return f.read()
        if source.scheme() == "pkg":
            return resources.files(source.path).joinpath(name).read_bytes()
    except (OSError, ValueError, TypeError, ImportError):
        return None
    return None


def inner_source(provider: str, path: str) -> ConfigSource:
    """The source Hydra registers for ``path``'s scheme, from Hydra's plugin registry."""
    scheme = scheme_of(path)
    if scheme == SCHEME:
        raise ValueError(f"{SCHEME}:// cannot wrap itself: {path}")
    for source_type in Plugins.instance().discover(ConfigSource):
        if source_type.scheme() == scheme:
            return source_type(provider, path if "://" in path else f"file://{path}")
    raise ValueError(f"no config source for the scheme {scheme!r} of {path}")


def fresh(result: ConfigResult) -> ConfigResult:
    """A copy of ``result`` that shares nothing Hydra may change (config, header, defaults)."""
    return ConfigResult(provider=result.provider, path=result.path, config=copy.deepcopy(result.config),
                        header=dict(result.header), defaults_list=copy.deepcopy(result.defaults_list),
                        is_schema_source=result.is_schema_source)


class CachedConfigSource(ConfigSource):
    """``pipelinecache://<inner path>``: the inner source, each file parsed once while its
    bytes stay the same."""

    def __init__(self, provider: str, path: str) -> None:
        super().__init__(provider=provider, path=path)
        self.inner = inner_source(provider, self.path)

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def load_config(self, config_path: str) -> ConfigResult:
        key = (self.inner.full_path(), config_path)
        now = file_bytes(self.inner, config_path)
        with _LOCK:
            held = _MEMO.get(key)
        if now is not None and held is not None and held[0] == now and held[1] is not None:
            return fresh(held[1])
        result = self.inner.load_config(config_path)  # Hydra's own load (and its errors)
        if now is not None and file_bytes(self.inner, config_path) == now:  # not changed while read
            # The first load keeps only the bytes: a single job composes once, and a copy
            # kept for later would cost it more than the parse. The second keeps a copy.
            kept = fresh(result) if held is not None and held[0] == now else None
            with _LOCK:
                _MEMO[key] = (now, kept)
        return result

    def available(self) -> bool:
        return self.inner.available()

    def is_group(self, config_path: str) -> bool:
        return self.inner.is_group(config_path)

    def is_config(self, config_path: str) -> bool:
        return self.inner.is_config(config_path)

    def exists(self, config_path: str) -> bool:
        return self.inner.exists(config_path)

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        return self.inner.list(config_path, results_filter)


class ConfigCacheSearchPath(SearchPathPlugin):
    """Puts :class:`CachedConfigSource` in place of each ``file://`` and ``pkg://`` entry."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        path = search_path.get_path()  # a MutableSequence (Hydra's ConfigSearchPath API)
        for i, element in enumerate(path):
            if scheme_of(element.path) in WRAPPED:
                inner = element.path if "://" in element.path else f"file://{element.path}"
                path[i] = SearchPathElement(element.provider, f"{SCHEME}://{inner}")
