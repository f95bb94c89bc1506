"""On-disk caches in safe formats, keyed by a digest of everything that shaped them.

A leaf package (no Hydra, MLflow or ``retrievers``): the app passes a directory (``outputs/cache``),
a key (a JSON-able dict) and a function that computes the value when the cache has no entry; plain
arrays go in and out, and ``load_or_compute_ranking`` wraps a ranking's in a ``Ranking``
(``pipeline.ranking``, the computing tier).

- Arrays are stored as ``.npy`` (``allow_pickle=False``) and keys as ``.json``; nothing is ever pickled.
- Every file is written to a temporary name in the same folder and renamed (``os.replace``),
  with the mode a plain ``open`` would give (0666 minus the umask), so a reader never sees
  half a file and concurrent writers of the same entry (a parallel Hydra launcher) simply let
  the last one win. The key's JSON file is written last: it is the entry's commit marker.
- Every entry is verified when read. Its JSON records a content hash of each array (xxh3_128
  of dtype, shape and bytes; blake2b where ``xxhash`` is missing) and the shapes it was written
  with; reading checks the hash, the shape the caller expects (queries, depth, documents,
  embedding dim) and a ranking's order (:func:`ranking_problem`). A failed check is a warning
  that names the file; the entry is discarded (its JSON removed) and recomputed, never
  trusted. Entries written before hashes existed are treated as missing (an info line).
- A cache folder that cannot be written (read-only disk, full disk, a path through a
  file) is one warning per folder naming it and the OS error; the computed value is
  returned all the same.

Layout under ``cache_dir`` (``digest`` is the sha256 of the key's canonical JSON, ``base`` the
digest of the key without its ``depth``)::

    arrays/<digest>.npy  arrays/<digest>.json                       load_or_compute_array
    rankings/<base>-d<depth>.doc_idx.npy  .scores.npy  .json        load_or_compute_ranking_arrays
    texts/<digest>/<shard>.hashes.npy  .emb.npy  .json               TextEmbeddingStore (per-text rows)
    files/<digest>/<name>  <name>.json                               load_or_build_file (ONNX exports)
"""

from __future__ import annotations

from pipeline.io.cache.entries import (ARRAYS, FILES, RANKINGS, TEXTS, RankingArrays, TextEmbeddingStore,
                                       load_or_build_file, load_or_compute_array, load_or_compute_ranking,
                                       load_or_compute_ranking_arrays, ranking_problem)
from pipeline.io.cache.store import (HASH_ALGO, canonical, canonical_json, content_hash, digest, file_hash, load_array,
                                     load_json, save_array, save_json, text_hashes, texts_digest)

__all__ = ["ARRAYS", "FILES", "HASH_ALGO", "RANKINGS", "TEXTS", "RankingArrays", "TextEmbeddingStore", "canonical",
           "canonical_json", "content_hash", "digest", "file_hash", "load_array", "load_json", "load_or_build_file",
           "load_or_compute_array", "load_or_compute_ranking", "load_or_compute_ranking_arrays", "ranking_problem",
           "save_array", "save_json", "text_hashes", "texts_digest"]
