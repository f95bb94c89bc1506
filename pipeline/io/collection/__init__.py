"""Collections: BEIR folders, TREC files, ir_datasets ids and the bundled sample.

Every loader returns a :class:`Collection`: ids and texts as lists of str (the texts of a large
plain BEIR corpus as :class:`FileTexts`, read from the file when needed), judgments as
integer arrays (:class:`pipeline.metrics.Qrels`), and a content digest that changes when
any document, query or judgment changes (used for cache keys and logged to MLflow).

Loaders (the ``_target_`` of ``conf/dataset/*.yaml``): :func:`load_beir`, :func:`load_trec`,
:func:`load_ir_datasets`, :func:`load_sample`; :func:`load_unjudged` reads a corpus and
queries that have no judgments yet (pooling). All of them stream their files line by line
(never ``read()`` a whole corpus), hash the content while they go, and apply the same
validation and counting rules whatever the source format (``assemble``; ``REPORT_KEYS``).

Readers for code that needs the records without a collection (e.g. the texts of a run's
documents): :func:`read_corpus` and :func:`read_queries` yield ``(line, id, text)`` with the
loaders' parsing rules, and :func:`detect_format` tells JSONL from TSV.

Modules: ``base`` (Collection, REPORT_KEYS), ``records`` (JSONL/TSV records), ``filetexts``
(FileTexts), ``assemble`` (records -> Collection), ``loaders`` (files), ``irds`` (ir_datasets).
"""

from __future__ import annotations

from pipeline.io.collection.assemble import Parts, load_parts
from pipeline.io.collection.base import REPORT_KEYS, Collection, DocRecord
from pipeline.io.collection.filetexts import FileTexts
from pipeline.io.collection.irds import load_ir_datasets
from pipeline.io.collection.loaders import (LAZY_TEXTS_MIN_BYTES, SAMPLE_DIR, load_beir, load_sample, load_trec,
                                            load_unjudged)
from pipeline.io.collection.records import detect_format, read_corpus, read_queries

__all__ = ["Collection", "DocRecord", "FileTexts", "LAZY_TEXTS_MIN_BYTES", "Parts", "REPORT_KEYS", "SAMPLE_DIR",
           "detect_format", "load_beir", "load_ir_datasets", "load_parts", "load_sample", "load_trec", "load_unjudged",
           "read_corpus", "read_queries"]
