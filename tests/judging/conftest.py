"""Shared helpers for the judging tests (pooling, Label Studio exports, agreement)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "pipeline" / "sample"


def ls_export(grades: dict[str, dict[tuple[str, str], int]], user_ids: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """A Label Studio JSON export (exportType=JSON) of ``grades[annotator][(qid, did)]``,
    shaped like Label Studio 1.23's: one task per item, ``completed_by`` an object with the
    e-mail for named annotators (an integer id for those in ``user_ids``)."""
    items = sorted({item for by in grades.values() for item in by})
    # one user id per annotator (Label Studio's: the same id is the same user, pipeline.judgments
    # counts it once); those in user_ids keep theirs
    taken = set((user_ids or {}).values())
    free = (i for i in range(101, 101 + len(grades) + len(taken) + 1) if i not in taken)
    ids = {who: next(free) for who in sorted(grades) if not (user_ids and who in user_ids)}
    tasks, next_id = [], 1
    for t, (qid, did) in enumerate(items, start=1):
        annotations = []
        for who, by in sorted(grades.items()):
            if (qid, did) not in by:
                continue
            completed_by: Any = user_ids[who] if user_ids and who in user_ids else {"id": ids[who], "email": who}
            annotations.append({
                "id": next_id, "completed_by": completed_by, "was_cancelled": False, "ground_truth": False,
                "result": [{"id": f"r{next_id}", "from_name": "grade", "to_name": "document", "type": "choices",
                            "origin": "manual", "value": {"choices": [str(by[(qid, did)])]}}],
            })
            next_id += 1
        tasks.append({"id": t, "data": {"query_id": qid, "query": f"question {qid}", "doc_id": did,
                                        "document": f"text of {did}"}, "annotations": annotations,
                      "predictions": []})
    return tasks


@pytest.fixture
def make_export():
    return ls_export


@pytest.fixture
def write_export(tmp_path):
    def write(tasks: Any, name: str = "export.json") -> Path:
        path = tmp_path / name
        path.write_text(tasks if isinstance(tasks, str) else json.dumps(tasks))
        return path

    return write
