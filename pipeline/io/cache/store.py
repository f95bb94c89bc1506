"""How every cache entry is named, written and read back: canonical keys, atomic files, content
hashes, and the checks that raise :class:`DamagedEntry` or :class:`LegacyEntry`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

try:  # much faster than blake2b on large arrays; blake2b where it is missing
    import xxhash
except ImportError:  # pragma: no cover - xxhash is a dependency
    xxhash = None

log = logging.getLogger(__name__)

HASH_ALGO = "xxh3_128" if xxhash is not None else "blake2b_128"


def canonical(obj: Any) -> Any:
    """A JSON-able copy of ``obj`` with one spelling per value (see :func:`digest`); what a
    cache entry records as its key, and compares with the key asked for."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else repr(value)  # JSON has no inf/nan; keep them distinct
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, Mapping):  # also OmegaConf DictConfig
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"cache keys need string dict keys, got {k!r}")
            out[k] = canonical(v)
        return out
    if isinstance(obj, Set):
        return sorted(canonical(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return canonical(obj.tolist())
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):  # also ListConfig
        return [canonical(v) for v in obj]
    raise TypeError(f"cannot use a {type(obj).__name__} in a cache key: {obj!r}")


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys: equal keys give equal text."""
    return json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(obj: Any) -> str:
    """sha256 hex of the canonical JSON of ``obj``: dicts (any ``Mapping``, so OmegaConf configs
    too) sorted by key, tuples and lists the same, numpy scalars as Python numbers, paths as
    strings; ``1`` and ``1.0`` differ (retrievers store floats as floats). Anything else raises
    ``TypeError`` rather than being hashed by its ``repr``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def texts_digest(ids: Sequence[str], texts: Sequence[str]) -> str:
    """sha256 of (id, text) pairs in order: changes when any id, text or the order changes."""
    h = hashlib.sha256()
    for i, t in zip(ids, texts, strict=True):
        for part in (str(i), str(t)):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no ambiguity
            h.update(data)
    return h.hexdigest()


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc``); else
    set and restored under a lock (``os.umask`` has no read-only form)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        with os.fdopen(fd, mode) as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def save_array(path: str | Path, array: NDArray) -> None:
    """Write ``array`` as ``.npy`` (no pickle) via a temporary file and a rename."""
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise TypeError("object arrays would need pickle; cache numeric arrays only")
    _atomic_write(Path(path), lambda fh: np.save(fh, array, allow_pickle=False), "wb")


def load_array(path: str | Path) -> NDArray:
    """The ``.npy`` array at ``path``, never unpickled (``allow_pickle=False``)."""
    return np.load(Path(path), allow_pickle=False)


def save_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON via a temporary file and a rename."""
    text = json.dumps(canonical(obj), sort_keys=True, indent=1, ensure_ascii=False)
    _atomic_write(Path(path), lambda fh: fh.write(text), "w")


def load_json(path: str | Path) -> Any:
    """The JSON value in ``path``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def content_hash(array: NDArray) -> str:
    """``"<algo>:<hex>"`` of an array's dtype, shape and C-order bytes."""
    array = np.ascontiguousarray(array)
    h = xxhash.xxh3_128() if xxhash is not None else hashlib.blake2b(digest_size=16)
    h.update(f"{array.dtype.str}{array.shape}".encode("ascii"))
    h.update(memoryview(array).cast("B") if array.size else b"")
    return f"{HASH_ALGO}:{h.hexdigest()}"


def file_hash(path: str | Path) -> str:
    """``"<algo>:<hex>"`` of a file's bytes (xxh3_128, blake2b-128 where xxhash is missing)."""
    h = xxhash.xxh3_128() if xxhash is not None else hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return f"{HASH_ALGO}:{h.hexdigest()}"


def text_hashes(texts: Sequence[str]) -> NDArray[np.uint64]:
    """xxh3_128 (blake2b-128 where xxhash is missing) of each text's UTF-8 bytes, as an
    ``[n, 2]`` uint64 array: one row per text, equal rows for equal texts."""
    if xxhash is not None:
        raw = b"".join(xxhash.xxh3_128_digest(str(t).encode("utf-8")) for t in texts)
    else:  # pragma: no cover - xxhash is a dependency
        raw = b"".join(hashlib.blake2b(str(t).encode("utf-8"), digest_size=16).digest() for t in texts)
    return np.frombuffer(raw, dtype=np.uint64).reshape(len(texts), 2).copy()


class DamagedEntry(Exception):
    """A cache file that does not match its record; ``str`` says how, ``path`` names it."""

    def __init__(self, path: Path, problem: str):
        super().__init__(problem)
        self.path = path


class LegacyEntry(Exception):
    """An entry written before content hashes (or with a hash this process cannot compute)."""


def stored_hash(meta: Mapping[str, Any], name: str) -> str:
    """The content hash a record holds for its file ``name``; LegacyEntry when it has none
    this process can check."""
    hashes = meta.get("hash")
    value = hashes.get(name) if isinstance(hashes, Mapping) else None
    if not isinstance(value, str):
        raise LegacyEntry("no content hash")
    if value.split(":", 1)[0] != HASH_ALGO:
        raise LegacyEntry(f"hashed with {value.split(':', 1)[0]}, this process uses {HASH_ALGO}")
    return value


def load_verified(path: Path, expected_hash: str, dtype: str) -> NDArray:
    """The array in ``path``; raises DamagedEntry unless it is the one that was written."""
    try:
        array = load_array(path)
    except (OSError, ValueError, EOFError) as err:
        raise DamagedEntry(path, f"unreadable ({err})") from None
    if str(array.dtype) != dtype:
        raise DamagedEntry(path, f"dtype {array.dtype}, expected {dtype}")
    if content_hash(array) != expected_hash:
        raise DamagedEntry(path, "content hash mismatch (the file changed after it was written)")
    return array


def check_shape(path: Path, shape: tuple[int, ...], expected: Sequence[int | None] | None) -> None:
    """DamagedEntry unless ``shape`` is ``expected`` (None: any shape; a None dimension: any size)."""
    if expected is None:
        return
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        want = "x".join("?" if e is None else str(e) for e in expected)
        raise DamagedEntry(path, f"shape {'x'.join(map(str, shape))}, expected {want}")


def all_finite(array: NDArray) -> bool:
    """Whether every value is finite: one float sum (NaN and inf propagate), the exact
    elementwise check only when that sum is not finite (it may just have overflowed)."""
    if array.dtype.kind not in "fc" or array.size == 0:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(array.sum()):
            return True
    return bool(np.isfinite(array).all())


def read_meta(meta: Path) -> dict[str, Any]:
    """An entry's JSON record; DamagedEntry when it is unreadable or not a JSON object."""
    try:
        stored = load_json(meta)
    except (OSError, ValueError) as err:
        raise DamagedEntry(meta, f"unreadable ({err})") from None
    if not isinstance(stored, dict):
        raise DamagedEntry(meta, f"unreadable (a JSON {type(stored).__name__}, not an object)")
    return stored


def discard(meta: Path) -> None:
    """Remove an entry's commit marker, so that nobody reads the entry again."""
    with contextlib.suppress(OSError):
        meta.unlink()


_UNWRITABLE_WARNED: set[str] = set()


def write_entry(cache_dir: str | Path, writes: Sequence[tuple[Path, Callable[[], None]]]) -> bool:
    """Run ``writes`` in order (the JSON marker last). An ``OSError`` is one warning per
    cache folder (naming it and the error) and ``False``: the caller keeps its value."""
    try:
        for _, write in writes:
            write()
        return True
    except OSError as err:
        folder = os.fspath(cache_dir)
        if folder not in _UNWRITABLE_WARNED:
            _UNWRITABLE_WARNED.add(folder)
            log.warning("cache folder %s is not writable (%s: %s); going on without caching",
                        folder, type(err).__name__, err)
        else:
            log.debug("cache write to %s failed: %s", folder, err)
        return False
