"""TREC and BEIR interchange formats: qrels and run files, read strictly, written plainly.

Readers take the fast path (pyarrow's CSV reader) and, when anything looks wrong, re-read the
file line by line (``pipeline.io.readers``) to report the first bad line by number: the common
case pays nothing for good error messages. Both paths drop a UTF-8 byte order mark and split
lines on ``\n``, ``\r\n`` and a bare ``\r``, so they give the same answer for the same bytes.

- qrels: TREC ``qid iter docid grade`` (whitespace separated) or a BEIR ``qrels/*.tsv``
  (header ``query-id<TAB>corpus-id<TAB>score``). Identical duplicate judgments are dropped
  and counted; duplicates whose grades disagree are an error (:func:`dedupe_judgments`, the
  one rule for judgments from any source).
- run: TREC ``qid Q0 docid rank score tag``. A document listed twice for one query is an
  error. ``.gz`` is accepted for both, and ``-`` (standard input) or a pipe for either.

Fields. A line is split on tabs when it holds exactly the expected number of tab-separated
fields (6 for a run, 4 for TREC qrels, 3 for BEIR qrels), each field then stripped of
surrounding whitespace: so ids may contain spaces in tab-separated files (BEIR ids often
do). Any other line is split on runs of whitespace (Python's ``str.split()``). Ids are
never empty. A grade is an ASCII integer (``[+-]?[0-9]+``) that fits 64 bits; a score is an
ASCII decimal number (``1``, ``-0.5``, ``.5``, ``1e-3``) that is finite as a 64-bit float.

Writing (:func:`write_run`): columns are separated by one space, or by one tab when some
query or document id contains whitespace, so that every id reads back as it was written
(by this module, and by any reader that splits on tabs). An id that cannot round-trip is
refused with :class:`InputError` naming it: an empty id, one with a tab, line break or
leading/trailing whitespace, or one with a lone surrogate (``"\\ud800"``, which JSON allows
and UTF-8 cannot encode). The file is written to a temporary name and renamed: a failed
write leaves nothing behind.

Tie rules: the order of a query's documents whose scores are equal. Every consumer of a run
(``python -m pipeline.cli score --tie-break``, ``retriever=run_file``'s ``tie_break``) uses
these names; all sort by score descending first, then by

- ``file_order``: the run file's line order (old name in the scorer: ``score``);
- ``doc_index``: the document's index in the corpus ascending, the project's rule for its
  own retrievers (needs a corpus: ``retriever=run_file`` only);
- ``docid_desc``: the document id descending, by code point: trec_eval's own re-sort, so
  metrics then equal trec_eval's exactly.
"""

from __future__ import annotations

from pipeline.io.formats.arrow import WHITESPACE, arrow_array, from_numpy, split_fields, to_numpy
from pipeline.io.formats.trec import (BEIR_QRELS_HEADER, TIE_BREAK_ALIASES, TIE_BREAKS, TIE_BREAKS_WITHOUT_CORPUS,
                                      QrelsFile, RunFile, check_writable_id, dedupe_judgments, grade_line,
                                      judgment_line, read_qrels, read_run, tie_break_rule, write_run)

__all__ = ["BEIR_QRELS_HEADER", "QrelsFile", "RunFile", "TIE_BREAKS", "TIE_BREAKS_WITHOUT_CORPUS", "TIE_BREAK_ALIASES",
           "WHITESPACE", "arrow_array", "check_writable_id", "dedupe_judgments", "from_numpy", "grade_line",
           "judgment_line", "read_qrels", "read_run", "split_fields", "tie_break_rule", "to_numpy", "write_run"]
