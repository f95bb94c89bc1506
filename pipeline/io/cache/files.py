"""Files built once per key (an exported model): ``files/<digest of key>/<name>`` and ``<name>.json``."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipeline.io.cache.keys import canonical, digest
from pipeline.io.cache.store import (DamagedEntry, LegacyEntry, discard, file_hash, read_meta, save_json, stored_hash,
                                     write_entry)

log = logging.getLogger(__name__)

FILES = "files"


def load_or_build_file(cache_dir: str | Path | None, key: Mapping[str, Any], name: str,
                       build: Callable[[Path], None]) -> tuple[Path, bool]:
    """A file built once per ``key`` (an exported model, ...). Returns (path, hit).

    ``build(path)`` writes the file at ``path`` (a temporary folder); it is then renamed to
    ``files/<digest of key>/<name>`` under ``cache_dir`` and its JSON marker (key, size,
    content hash) written last. A cached file is used only when its marker's key matches and
    its size and hash are those recorded; else it is built again. ``cache_dir=None`` or a
    folder that cannot be written: built into a temporary folder of this process."""
    if cache_dir is not None:
        folder = Path(cache_dir) / FILES / digest(key)
        target, meta = folder / name, folder / f"{name}.json"
        if meta.exists() and _verified(target, meta, key):
            return target, True
        built = _build_into_cache(cache_dir, folder, name, key, build)
        if built is not None:
            return built, False
    tmp = Path(tempfile.mkdtemp(prefix="rag-eval-build-"))
    build(tmp / name)
    return tmp / name, False


def _verified(target: Path, meta: Path, key: Mapping[str, Any]) -> bool:
    """Whether the cached ``target`` is the file its marker records (key, size, content
    hash); when it is not, a warning (info for an unverifiable one) and the marker is removed."""
    try:
        stored = read_meta(meta)
        if stored.get("key") != canonical(key):
            raise DamagedEntry(meta, "holds another key")
        expected = stored_hash(stored, "file")
        try:
            size = target.stat().st_size
        except OSError as err:
            raise DamagedEntry(target, f"unreadable ({err})") from None
        if size != stored.get("size"):
            raise DamagedEntry(target, f"{size} bytes, {stored.get('size')} recorded")
        if file_hash(target) != expected:
            raise DamagedEntry(target, "content hash mismatch (the file changed after it was written)")
        return True
    except LegacyEntry as why:
        log.info("cached file %s cannot be verified (%s); building it again", meta, why)
    except DamagedEntry as bad:
        log.warning("cached file %s is unreadable or damaged: %s; building it again", bad.path, bad)
    discard(meta)
    return False


def _build_into_cache(cache_dir: str | Path, folder: Path, name: str, key: Mapping[str, Any],
                      build: Callable[[Path], None]) -> Path | None:
    """Build in a temporary folder inside ``folder``, then commit: the file renamed into
    place, its marker written last. Returns where the file is (outside the cache when it
    could not be committed), or None when ``folder`` cannot be written (one warning)."""
    target, meta = folder / name, folder / f"{name}.json"
    made: list[Path] = []

    def make_tmp() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        made.append(Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}.", suffix=".tmp")))

    write_entry(cache_dir, [(folder, make_tmp)])  # a folder that cannot be written: one warning
    if not made:
        return None
    tmp = made[0]
    try:
        built = tmp / name
        build(built)
        record = {"key": key, "size": built.stat().st_size, "hash": {"file": file_hash(built)}}
        if write_entry(cache_dir, [(target, lambda: os.replace(built, target)),
                                   (meta, lambda: save_json(meta, record))]):
            return target
        if built.exists():  # could not be committed: keep it outside the cache
            keep = Path(tempfile.mkdtemp(prefix="rag-eval-build-")) / name
            shutil.move(built, keep)
            return keep
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return None
