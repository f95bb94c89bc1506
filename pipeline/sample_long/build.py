"""Build the long-document form of the bundled sample (``pipeline/sample_long``) from ``pipeline/sample``.

    python pipeline/sample_long/build.py      # rewrites corpus.jsonl, queries.jsonl, qrels/test.tsv here

Each handbook section (the passages' ``title``) becomes one document: id = the section's
slug (``brakes-disc``), title = the section, text = its passages in passage-id order joined
by a blank line. Queries are copied. A query's grade for a document is the best grade of the
document's passages that the query judged (passages it did not judge do not count); a
document none of whose passages the query judged stays unjudged.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "sample"


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def build(sample: Path = SAMPLE, out: Path = HERE) -> dict[str, int]:
    passages = [json.loads(line) for line in (sample / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    passages.sort(key=lambda p: p["_id"])
    sections: dict[str, list[dict]] = {}
    for p in passages:
        sections.setdefault(p["title"], []).append(p)
    doc_of = {p["_id"]: slug(p["title"]) for p in passages}
    if len({slug(t) for t in sections}) != len(sections):
        raise SystemExit("two sections have the same slug")
    with open(out / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for title, members in sections.items():
            text = "\n\n".join(p["text"] for p in members)
            fh.write(json.dumps({"_id": slug(title), "title": title, "text": text}, ensure_ascii=False) + "\n")
    (out / "queries.jsonl").write_bytes((sample / "queries.jsonl").read_bytes())
    grades: dict[tuple[str, str], int] = {}
    order: list[tuple[str, str]] = []
    with open(sample / "qrels" / "test.tsv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            key = (row["query-id"], doc_of[row["corpus-id"]])
            if key not in grades:
                order.append(key)
                grades[key] = int(row["score"])
            else:
                grades[key] = max(grades[key], int(row["score"]))
    (out / "qrels").mkdir(exist_ok=True)
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8", newline="\n") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        fh.writelines(f"{q}\t{d}\t{grades[(q, d)]}\n" for q, d in sorted(order))
    return {"documents": len(sections), "judgments": len(order)}


if __name__ == "__main__":
    print(build())
