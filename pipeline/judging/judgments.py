"""Label Studio export -> TREC qrels and inter-annotator agreement (the library of ``python -m pipeline.cli judgments``).

The export is Label Studio's JSON export (``exportType=JSON``: a list of tasks, each with ``data`` and
``annotations``) of a project made by ``pipeline.pool``: every task's ``data`` has ``query_id`` and
``doc_id``, and the grade is the exported value of the ``<Choices name="grade">`` (the digit ``0``-``3``;
a value such as ``"2: gives useful background"`` is read by its leading integer). A grade must be an
integer in ``GRADE_MIN..GRADE_MAX`` (0..100): a grade is a judgment, and a negative one would mean
"pooled but not judged" in qrels (docs/metrics.md), so it is refused, as is a grade above 100 (no
grading scale has that many levels; the agreement coefficients allocate one row per grade level).
The whole export is checked before anything is written.

An annotator is a Label Studio user: ``completed_by`` is the user's id (``1``, ``"1"``) or a user
object (``{"id": 1, "email": ...}``): the same id is the same annotator in either form. The
annotator is named by the e-mail that any annotation of the export gives for that id, else
``user<id>``; a user object with an e-mail but no id is named by the e-mail. Cancelled (skipped)
annotations and annotations without a grade are counted and left out; when one annotator graded
the same (query, document) more than once the annotation with the highest id (the latest) counts.

Written by :func:`write_outputs` (the command's ``--out``; default: the export's folder / ``<export name>.judgments``):

- ``qrels.<annotator>.txt``: one TREC qrels per annotator (``qid 0 docid grade``); names that would
  clash (with ``consensus``, or two annotators alike once made safe for a file name, case ignored)
  get a ``_`` appended, so no file is written twice;
- ``qrels.consensus.txt``: one grade per judged (query, document), by ``--rule`` over the grades it
  received (one grade: that grade): ``median`` (default): the median; with an even number of grades,
  the lower of the two middle grades (never above what half of the annotators gave); ``majority``: the
  most frequent grade, a tie going to the lowest of the tied grades; ``max``: the highest grade (a
  document is as relevant as its most generous annotator says);
- ``agreement.json``: for each pair of annotators, on the items both graded, Cohen's kappa with
  quadratic weights (:func:`quadratic_kappa`; equals scikit-learn's
  ``cohen_kappa_score(weights="quadratic", labels=range(lo, hi + 1))``), and over all annotators
  Krippendorff's alpha with the ordinal distance (``krippendorff.alpha``, items graded once carry no
  pairable value); each on the graded scale and binarized (grade >= ``--relevance-level`` -> 1, else 0).
  A coefficient whose chance disagreement is zero (e.g. both annotators always gave the same grade) is
  undefined: ``null``. The command prints one line reading them on Krippendorff's (2004) scale for alpha
  and Landis and Koch's (1977) for kappa (:func:`agreement_reading`, :data:`ALPHA_BANDS`, :data:`KAPPA_BANDS`);
- ``disagreements.tsv``: every item whose grades differ, worst first: largest spread (max - min grade),
  then items on both sides of the relevance level, then by query and document id; with the grades of
  each annotator, the consensus and the question.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import krippendorff
import numpy as np
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.formats import check_writable_id
from pipeline.io.results import atomic_open

RULES = ("median", "majority", "max")
#: The grades pipeline.judgments accepts (the module docstring): 0 = not relevant.
GRADE_MIN, GRADE_MAX = 0, 100


@dataclass
class Judgments:
    """Grades by annotator: ``grades[annotator][(query_id, doc_id)] = grade``."""

    grades: dict[str, dict[tuple[str, str], int]]
    queries: dict[str, str] = field(default_factory=dict)  # query id -> text (from the tasks)
    report: dict[str, int] = field(default_factory=dict)

    @property
    def annotators(self) -> list[str]:
        return sorted(self.grades)

    def items(self) -> list[tuple[str, str]]:
        """Every (query, document) graded by someone, sorted."""
        return sorted({item for by in self.grades.values() for item in by})


def _user_key(who: Any) -> str | None:
    """The user id of a ``completed_by`` (an id, its string, or a user object), as text:
    ``1``, ``"1"`` and ``{"id": 1}`` are one user; None when it names no id."""
    if isinstance(who, dict):
        who = who.get("id")
    if isinstance(who, bool) or who is None:
        return None
    text = str(who).strip()
    return str(int(text)) if re.fullmatch(r"[+-]?\d+", text) else (text or None)


def user_emails(tasks: list[Any]) -> dict[str, str]:
    """User id -> the first e-mail any annotation of the export gives for it (the module docstring)."""
    emails: dict[str, str] = {}
    for task in tasks:
        annotations = task.get("annotations") if isinstance(task, dict) else None
        for annotation in annotations if isinstance(annotations, list) else []:
            who = annotation.get("completed_by") if isinstance(annotation, dict) else None
            key = _user_key(who)
            if key is not None and isinstance(who, dict) and isinstance(who.get("email"), str) and who["email"].strip():
                emails.setdefault(key, who["email"].strip())
    return emails


def annotator_name(annotation: dict[str, Any], emails: dict[str, str]) -> str:
    """The annotator's name: the e-mail known for its user id, else ``user<id>`` (the module docstring)."""
    who = annotation.get("completed_by")
    key = _user_key(who)
    if key is not None:
        return emails.get(key, f"user{key}")
    if isinstance(who, dict) and isinstance(who.get("email"), str) and who["email"].strip():
        return who["email"].strip()
    return "unknown"


def _load_tasks(path: Path) -> list[Any]:
    """The export's list of tasks; InputError when it is missing, not JSON or not a list."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("export file not found", path) from None
    except OSError as err:
        raise InputError(f"cannot read the export: {err.strerror}", path) from None
    try:
        tasks = json.loads(raw)
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", path) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg} (column {err.colno})", path, err.lineno) from None
    except RecursionError:  # Python's parser stops at about 1000 levels; an export has 6
        raise InputError("not a Label Studio JSON export: nested too deeply", path) from None
    if not isinstance(tasks, list):
        raise InputError("not a Label Studio JSON export: expected a list of tasks "
                         f"(exportType=JSON), found a JSON {type(tasks).__name__}", path)
    return tasks


def _annotation_grade(annotation: Any, where: str, choices: str, path: Path, report: dict[str, int]) -> int | None:
    """The grade an annotation gives, or None when it was cancelled or has none (counted in
    ``report``); InputError when malformed."""
    if not isinstance(annotation, dict):
        raise InputError(f"{where}: an annotation is not an object", path)
    report["annotations"] += 1
    if annotation.get("was_cancelled"):
        report["cancelled"] += 1
        return None
    results = annotation.get("result") or []
    if not isinstance(results, list):
        raise InputError(f"{where}: an annotation's 'result' is not a list", path)
    values = [r.get("value", {}).get("choices") for r in results
              if isinstance(r, dict) and r.get("from_name") == choices and isinstance(r.get("value"), dict)]
    values = [v for v in values if v]
    if not values:
        report["without_grade"] += 1
        return None
    if not isinstance(values[0], list) or len(values[0]) != 1:
        raise InputError(f"{where}: expected one choice in {choices!r}, found {values[0]!r}", path)
    match = re.match(r"^([+-]?\d+)(?:\s*[:.)\-]|$)", str(values[0][0]).strip())  # "2" or "2: gives useful ..."
    if not match:
        raise InputError(f"{where}: grade {values[0][0]!r} is not an integer (expected 0-3 or '2: ...')", path)
    grade = int(match.group(1))
    if not GRADE_MIN <= grade <= GRADE_MAX:
        label = f"annotation {annotation['id']}" if "id" in annotation else "an annotation"
        raise InputError(f"{where}, {label}: grade {match.group(1)} is outside {GRADE_MIN}..{GRADE_MAX} (grades are "
                         f"integers from {GRADE_MIN} = not relevant; a negative grade would mean 'not judged')", path)
    return grade


def read_export(path: str | Path, choices: str = "grade") -> Judgments:
    """Parse a Label Studio JSON export (the module docstring); InputError on anything malformed."""
    path = Path(path)
    tasks = _load_tasks(path)
    grades: dict[str, dict[tuple[str, str], tuple[int, int]]] = {}  # annotator -> item -> (order, grade)
    queries: dict[str, str] = {}
    report = dict.fromkeys(("tasks", "annotations", "cancelled", "without_grade", "regraded"), 0)
    emails = user_emails(tasks)
    for i, task in enumerate(tasks):
        where = f"task {i + 1}" + (f" (id {task.get('id')})" if isinstance(task, dict) and "id" in task else "")
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise InputError(f"{where}: not a task object with a 'data' object", path)
        data = task["data"]
        for key in ("query_id", "doc_id"):
            if not isinstance(data.get(key), (str, int)) or not str(data.get(key)).strip():
                raise InputError(f"{where}: data has no {key!r} (was the project made by pipeline.pool?)", path)
        annotations = task.get("annotations", [])
        if not isinstance(annotations, list):
            raise InputError(f"{where}: 'annotations' is not a list", path)
        item = (str(data["query_id"]).strip(), str(data["doc_id"]).strip())
        _check_ids(item, where, path)
        if isinstance(data.get("query"), str):
            queries.setdefault(item[0], data["query"])
        report["tasks"] += 1
        for annotation in annotations:
            grade = _annotation_grade(annotation, where, choices, path, report)
            if grade is None:
                continue
            who = annotator_name(annotation, emails)
            order = annotation.get("id") if isinstance(annotation.get("id"), int) else report["annotations"]
            mine = grades.setdefault(who, {})
            if item in mine:
                report["regraded"] += 1
                if mine[item][0] > order:
                    continue
            mine[item] = (order, grade)
    if not report["tasks"]:
        raise InputError("the export has no tasks", path)
    return Judgments({who: {item: g for item, (_, g) in by.items()} for who, by in grades.items()}, queries, report)


def _check_ids(item: tuple[str, str], where: str, path: Path) -> None:
    """InputError naming the task when its query or document id cannot be written to a qrels
    file (a tab or a line break inside): found while reading the export, not when writing."""
    for what, value in zip(("query", "document"), item):
        try:
            check_writable_id(value, what, path)
        except InputError as err:
            problem = err.problem.split(": ", 1)[-1]  # "<what> id '...' contains a tab or a line break"
            raise InputError(f"{where}: {problem}: a qrels file cannot hold it", path) from None


def consensus_grade(grades: Sequence[int], rule: str) -> int:
    """One grade from several, by ``rule`` (median, majority, max; ties as documented)."""
    ordered = sorted(grades)
    if not ordered:
        raise ValueError("no grades")
    if rule == "median":
        return ordered[(len(ordered) - 1) // 2]  # the lower middle grade when the count is even
    if rule == "majority":
        values, counts = np.unique(ordered, return_counts=True)
        return int(values[np.argmax(counts)])  # argmax takes the first (lowest) of tied counts
    if rule == "max":
        return ordered[-1]
    raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(RULES)}")


def consensus(judgments: Judgments, rule: str) -> dict[tuple[str, str], int]:
    return {item: consensus_grade([by[item] for by in judgments.grades.values() if item in by], rule)
            for item in judgments.items()}


def quadratic_kappa(a: NDArray[np.integer], b: NDArray[np.integer]) -> float:
    """Cohen's kappa with quadratic weights of two annotators' integer grades of the same
    items: 1 - sum(w * O) / sum(w * E), w_ij = (i - j)^2 over the grades lo..hi seen in a or b,
    O the observed joint proportions, E the product of the marginals. NaN when sum(w * E) = 0."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if len(a) != len(b):
        raise ValueError("the two annotators must grade the same items")
    if not len(a):
        return float("nan")
    lo = min(a.min(), b.min())
    n = int(max(a.max(), b.max()) - lo + 1)
    observed = np.zeros((n, n))
    np.add.at(observed, (a - lo, b - lo), 1.0)
    observed /= len(a)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    i = np.arange(n)
    w = (i[:, None] - i[None, :]).astype(np.float64) ** 2
    chance = float((w * expected).sum())
    if chance == 0.0:
        return float("nan")
    return 1.0 - float((w * observed).sum()) / chance


def reliability_matrix(judgments: Judgments, items: Sequence[tuple[str, str]]) -> NDArray[np.float64]:
    """annotators x items, NaN where an annotator did not grade an item."""
    matrix = np.full((len(judgments.annotators), len(items)), np.nan)
    for row, who in enumerate(judgments.annotators):
        by = judgments.grades[who]
        for col, item in enumerate(items):
            if item in by:
                matrix[row, col] = by[item]
    return matrix


def ordinal_alpha(matrix: NDArray[np.floating]) -> float:
    """Krippendorff's alpha, ordinal, of an annotators x items matrix (NaN = missing); NaN when
    fewer than two pairable values or a single value in them (no chance disagreement)."""
    pairable = np.sum(~np.isnan(matrix), axis=0) >= 2
    values = matrix[:, pairable]
    values = values[~np.isnan(values)]
    if values.size < 2 or len(np.unique(values)) < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal"))


def _finite(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)


def agreement(judgments: Judgments, relevance_level: int = 1) -> dict[str, Any]:
    """Pairwise quadratic kappa and ordinal alpha, graded and binarized (the module docstring)."""
    items = judgments.items()
    matrix = reliability_matrix(judgments, items)
    binary = np.where(np.isnan(matrix), np.nan, (matrix >= relevance_level).astype(np.float64))
    pairs = []
    for x, y in itertools.combinations(judgments.annotators, 2):
        gx, gy = judgments.grades[x], judgments.grades[y]
        common = sorted(gx.keys() & gy.keys())
        a = np.array([gx[i] for i in common], np.int64)
        b = np.array([gy[i] for i in common], np.int64)
        pairs.append({"annotators": [x, y], "n_items": len(common),
                      "exact_agreement": _finite(float(np.mean(a == b))) if len(common) else None,
                      "kappa_quadratic": _finite(quadratic_kappa(a, b)),
                      "kappa_quadratic_binary": _finite(quadratic_kappa(a >= relevance_level, b >= relevance_level))})
    return {"annotators": {who: len(judgments.grades[who]) for who in judgments.annotators}, "n_items": len(items),
            "n_items_multiply_graded": int(np.sum(np.sum(~np.isnan(matrix), axis=0) >= 2)),
            "relevance_level": relevance_level, "alpha_ordinal": _finite(ordinal_alpha(matrix)),
            "alpha_ordinal_binary": _finite(ordinal_alpha(binary)), "pairs": pairs}


#: Krippendorff (2004), Content Analysis, 2nd ed., p. 241: "rely only on variables with reliabilities
#: above alpha = .800"; between .667 and .800 "only for drawing tentative conclusions". (lower bound, word)
ALPHA_BANDS = ((0.800, "reliable"), (0.667, "tentative"), (-np.inf, "unreliable"))
#: Landis and Koch (1977), Biometrics 33(1), p. 165: < 0 poor, 0-0.20 slight, 0.21-0.40 fair, 0.41-0.60
#: moderate, 0.61-0.80 substantial, 0.81-1 almost perfect. (upper bound, word); a value between two
#: printed bounds (0.205) goes to the band above.
KAPPA_BANDS = ((0.0, "poor"), (0.20, "slight"), (0.40, "fair"), (0.60, "moderate"), (0.80, "substantial"),
               (np.inf, "almost perfect"))
ALPHA_SOURCE = "Krippendorff 2004: >= 0.800 reliable, >= 0.667 tentative conclusions only"
KAPPA_SOURCE = ("Landis & Koch 1977: < 0 poor, then slight, fair, moderate, substantial, almost perfect up to "
                "0.20, 0.40, 0.60, 0.80, 1")


def alpha_band(alpha: float | None) -> str:
    """Krippendorff's word for an alpha (:data:`ALPHA_BANDS`); ``undefined`` for None or NaN."""
    if alpha is None or not np.isfinite(alpha):
        return "undefined"
    return next(word for bound, word in ALPHA_BANDS if alpha >= bound)


def kappa_band(kappa: float | None) -> str:
    """Landis and Koch's word for a kappa (:data:`KAPPA_BANDS`); ``undefined`` for None or NaN.
    Their bands were drawn for unweighted kappa; quadratic weights usually give higher values."""
    if kappa is None or not np.isfinite(kappa):
        return "undefined"
    if kappa < 0.0:
        return "poor"
    return next(word for bound, word in KAPPA_BANDS[1:] if kappa <= bound)


def agreement_reading(stats: dict[str, Any]) -> str:
    """One line saying what :func:`agreement`'s alpha and kappa (graded and binary) mean, with
    the source of each scale; with several pairs of annotators, the range of kappa over them
    (the lines above it name each pair)."""

    def word(v: float | None, band: Callable[[float | None], str]) -> str:
        return "undefined" if v is None else f"{v:.4f} {band(v)}"

    alpha = (f"alpha graded {word(stats['alpha_ordinal'], alpha_band)}, "
             f"binary {word(stats['alpha_ordinal_binary'], alpha_band)} ({ALPHA_SOURCE})")
    pairs = [p for p in stats["pairs"] if p["n_items"]]
    if not pairs:
        return f"reading: {alpha}; kappa: no two annotators graded the same item"
    kappas = []
    for scale, key in (("graded", "kappa_quadratic"), ("binary", "kappa_quadratic_binary")):
        values = sorted(p[key] for p in pairs if p[key] is not None)
        if not values:
            kappas.append(f"{scale} undefined")
        elif len(pairs) == 1:
            kappas.append(f"{scale} {word(values[0], kappa_band)}")
        else:
            kappas.append(f"{scale} {word(values[0], kappa_band)} to {word(values[-1], kappa_band)} "
                          f"over {len(values)} pairs")
    return f"reading: {alpha}; kappa {', '.join(kappas)} ({KAPPA_SOURCE})"


def disagreements(judgments: Judgments, agreed: dict[tuple[str, str], int],
                  relevance_level: int) -> list[dict[str, Any]]:
    """Items whose grades differ, worst first (the module docstring)."""
    rows = []
    for item in judgments.items():
        given = {who: by[item] for who, by in judgments.grades.items() if item in by}
        lo, hi = min(given.values()), max(given.values())
        if lo == hi:
            continue
        rows.append({"query_id": item[0], "doc_id": item[1], "spread": hi - lo,
                     "crosses_relevance_level": int(lo < relevance_level <= hi),
                     "grades": ";".join(f"{who}={g}" for who, g in sorted(given.items())),
                     "consensus": agreed[item], "query": judgments.queries.get(item[0], "")})
    rows.sort(key=lambda r: (-r["spread"], -r["crosses_relevance_level"], r["query_id"], r["doc_id"]))
    return rows


#: Names of ``qrels.<name>.txt`` files that are not an annotator's: an annotator whose e-mail is
#: ``consensus`` gets ``qrels.consensus_.txt`` (and ``consensus_`` then ``consensus__``).
RESERVED_NAMES = ("consensus",)


def _safe_name(annotator: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", annotator).strip("._") or "annotator"


def _write_qrels(path: Path, grades: dict[tuple[str, str], int]) -> None:
    for q, d in grades:
        check_writable_id(q, "query", path)
        check_writable_id(d, "document", path)
    sep = "\t" if any(any(c.isspace() for c in q + d) for q, d in grades) else " "
    with atomic_open(path) as fh:
        fh.write("".join(f"{q}{sep}0{sep}{d}{sep}{g}\n" for (q, d), g in sorted(grades.items())))


def write_outputs(out: Path, judgments: Judgments, rule: str, relevance_level: int) -> dict[str, Any]:
    """Write every output (the module docstring) into ``out``; returns agreement.json's
    content plus ``n_disagreements``. Everything is computed before the first file is written."""
    files: dict[str, str] = {}
    used = set(RESERVED_NAMES)  # casefolded: one file on a case-insensitive disk (macOS, Windows)
    for who in judgments.annotators:
        name = _safe_name(who)
        while name.casefold() in used:
            name += "_"
        used.add(name.casefold())
        files[who] = str(out / f"qrels.{name}.txt")
    agreed = consensus(judgments, rule)
    stats = agreement(judgments, relevance_level)
    stats.update({"rule": rule, "qrels": files, "consensus": str(out / "qrels.consensus.txt"),
                  "export": judgments.report})
    rows = disagreements(judgments, agreed, relevance_level)
    out.mkdir(parents=True, exist_ok=True)
    for who, path in files.items():
        _write_qrels(Path(path), judgments.grades[who])
    _write_qrels(out / "qrels.consensus.txt", agreed)
    with atomic_open(out / "agreement.json") as fh:
        json.dump(stats, fh, indent=2, allow_nan=False)
    columns = ["query_id", "doc_id", "spread", "crosses_relevance_level", "grades", "consensus", "query"]
    with atomic_open(out / "disagreements.tsv") as fh:
        fh.write("\t".join(columns) + "\n")
        for row in rows:
            fh.write("\t".join(re.sub(r"\s+", " ", str(row[c])) for c in columns) + "\n")
    stats["n_disagreements"] = len(rows)
    return stats
