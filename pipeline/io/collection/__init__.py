"""Collections: BEIR folders, TREC files, ir_datasets ids and the bundled sample.

Every loader (the ``_target_`` of ``conf/dataset/*.yaml``) returns a :class:`Collection`. The
loaders stream their files line by line (never ``read()`` a whole corpus; a large plain BEIR
corpus's texts stay in the file, :class:`FileTexts`), hash the content while they go, and apply
the same validation and counting rules whatever the source format (``assemble``).
:func:`read_corpus` and :func:`read_queries` yield the records for code that needs no collection.
"""

from __future__ import annotations

from pipeline.io.collection.assemble import REPORT_KEYS, Parts, load_parts
from pipeline.io.collection.loaders import (LAZY_TEXTS_MIN_BYTES, SAMPLE_DIR, load_beir, load_ir_datasets, load_sample,
                                            load_trec, load_unjudged)
from pipeline.io.collection.records import Collection, DocRecord, FileTexts, detect_format, read_corpus, read_queries

__all__ = ["Collection", "DocRecord", "FileTexts", "LAZY_TEXTS_MIN_BYTES", "Parts", "REPORT_KEYS", "SAMPLE_DIR",
           "detect_format", "load_beir", "load_ir_datasets", "load_parts", "load_sample", "load_trec", "load_unjudged",
           "read_corpus", "read_queries"]
