"""The metric definitions are written once, in code (``pipeline.metrics.TABLE``,
``pipeline.metrics.GRADES`` and ``MEANS``): every run's ``definition_card.md`` is built from them, and the
generated parts of docs/metrics.md (between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``) must be what they give. ``UPDATE_DOCS=1`` rewrites those parts."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pipeline.metrics import GRADES, MEANS, TABLE, definition_card, definitions_table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
#: How the page states the relevance level and the gain (a card states the run's own).
LEVEL = "`relevance_level` (default 1)"
GAIN = "2^rel - 1 (`gain: exp`, the default) or rel (`gain: linear`, as trec_eval)"
_BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def generated() -> dict[str, str]:
    """Each generated part of docs/metrics.md, by name."""
    return {"GRADES": GRADES.format(level=LEVEL) + "\n", "TABLE": definitions_table(GAIN, sources=True) + "\n",
            "MEANS": "- " + MEANS.replace("\n", "\n  ") + "\n"}


def regenerate(page: str) -> str:
    """``page`` with every generated part as the code gives it."""
    parts = generated()
    return _BLOCK.sub(lambda m: m[1] + parts[m[2]] + m[4], page)


def test_the_generated_parts_of_docs_metrics_are_current():
    page = PAGE.read_text()
    names = [m[2] for m in _BLOCK.finditer(page)]
    assert sorted(names) == sorted(generated()), names
    current = regenerate(page)
    if current != page and os.environ.get("UPDATE_DOCS") == "1":
        PAGE.write_text(current)
        page = current
    assert current == page, "docs/metrics.md is not what pipeline.metrics gives: run this test with UPDATE_DOCS=1"


def test_the_page_the_card_and_the_table_state_each_definition_once_in_code():
    """Every family's definition reaches the page and the card word for word, and a changed
    definition changes the generated page (so a hand edit there is caught)."""
    page = PAGE.read_text()
    card = definition_card("exp", 2, "score descending", k=5)
    for family in TABLE:
        assert f"| `{family.key}` | {family.definition.format(gain=GAIN)} | {family.source} |" in page
        assert family.definition.format(gain="2^rel - 1 (`gain: exp`)") in card
    assert GRADES.format(level="2 (`relevance_level`)") in card
    assert "- " + MEANS.replace("\n", "\n  ") in card and "- " + MEANS.replace("\n", "\n  ") in page
    edited = page.replace("(# relevant in top K) / R", "(# relevant in top K) / K", 1)
    assert edited != page and regenerate(edited) == page
