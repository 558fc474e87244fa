"""Question sets: kbtool's JSONL, BEIR folders and TREC qrels, plus a linter.

Native JSONL, one question per line::

    {"id": "q001", "question": "What causes TW-E5120?",
     "relevant": [{"doc": "manual/troubleshooting.md", "evidence": "cannot read from or write to", "grade": 2}],
     "tags": ["exact-id"]}

``relevant`` entries may also be plain strings (a document id, grade 1). An empty ``relevant``
list marks a question the knowledge base cannot answer: the right behaviour is to refuse.
Relevance is stated against documents (and evidence text), never chunk ids, so labels survive
re-chunking.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import InputError, UsageError

DEFAULT_DEPTH = 100  # chunks ranked per question and mode, in eval and calibrate (documents collapse from them)

QUESTION_FIELDS = {"id", "question", "relevant", "tags", "notes"}
MAX_QUESTION_FILE_BYTES = 200 * 2**20  # a question set (or queries file) over 200 MB is refused
MAX_QUESTIONS = 100_000  # questions a set may hold (eval runs each of them in every mode)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
RELEVANT_FIELDS = {"doc", "evidence", "section", "grade"}


@dataclass
class Relevant:
    doc: str
    grade: float = 1.0
    evidence: str | None = None
    section: str | None = None


@dataclass
class Question:
    id: str
    question: str
    relevant: list[Relevant] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    line: int | None = None

    @property
    def answerable(self) -> bool:
        return any(r.grade >= 1 for r in self.relevant)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("line")
        return d


@dataclass
class LintIssue:
    source: str
    line: int | None
    message: str
    fatal: bool = False  # fatal even without --strict

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


@dataclass
class QuestionSet:
    name: str
    questions: list[Question]
    issues: list[LintIssue] = field(default_factory=list)
    source: str = ""


def load_questions(path: str | Path, *, qrels: str | Path | None = None, split: str = "test") -> QuestionSet:
    """Load a native JSONL set, a BEIR folder, or a queries file plus ``qrels`` (TREC or BEIR TSV)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such question set")
    for file in (path / "queries.jsonl", qrels) if path.is_dir() else (path, qrels):
        if file and Path(file).is_file() and Path(file).stat().st_size > MAX_QUESTION_FILE_BYTES:
            raise InputError(f"{file}: {Path(file).stat().st_size / 2**20:.0f} MB is over the question set limit "
                             f"of {MAX_QUESTION_FILE_BYTES // 2**20} MB: split it into several sets")
    qs = _load(path, qrels, split)
    if len(qs.questions) > MAX_QUESTIONS:
        raise InputError(f"{path}: {len(qs.questions)} questions is over the limit of {MAX_QUESTIONS}: "
                         "split the set, or sample it")
    qs.source = str(path)
    return qs


def _load(path: Path, qrels, split: str) -> QuestionSet:
    if path.is_dir():
        queries = path / "queries.jsonl"
        qrels_file = Path(qrels) if qrels else path / "qrels" / f"{split}.tsv"
        if not queries.exists():
            raise InputError(f"{path} has no queries.jsonl: a BEIR folder needs queries.jsonl and qrels/{split}.tsv")
        if not qrels_file.exists():
            raise InputError(f"{qrels_file} not found: give another split or a qrels file")
        return _from_queries_and_qrels(path.name, queries, qrels_file)
    if qrels:
        if not Path(qrels).is_file():
            raise InputError(f"qrels {qrels}: no such file")
        return _from_queries_and_qrels(path.stem, path, Path(qrels))
    return _load_native(path)


def _lines(path: Path):
    """(line number, text) of a UTF-8 file, or InputError naming the line that is not UTF-8."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{path}:{lineno}: not UTF-8: save the file as UTF-8") from None


def _load_native(path: Path) -> QuestionSet:
    qs = QuestionSet(path.stem, [])
    seen: dict[str, int] = {}
    src = str(path)
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{src}:{lineno}: not valid JSON ({exc.msg}): one JSON object per line") from None
        if not isinstance(rec, dict):
            raise InputError(f"{src}:{lineno}: expected a JSON object with id, question, relevant")
        q = _question(rec, src, lineno, qs.issues)
        if q is None:
            continue
        if q.id in seen:
            qs.issues.append(LintIssue(src, lineno, f"duplicate id {q.id!r} (first on line {seen[q.id]})", True))
            continue
        seen[q.id] = lineno
        qs.questions.append(q)
    if not qs.questions:
        fatal = [i for i in qs.issues if i.fatal]
        raise InputError(str(fatal[0]) if fatal else f"{src}: no questions found")
    return qs


def _question(rec: dict, src: str, lineno: int, issues: list[LintIssue]) -> Question | None:
    unknown = set(rec) - QUESTION_FIELDS
    if unknown:
        issues.append(LintIssue(src, lineno, f"unknown field(s) {', '.join(sorted(unknown))}; "
                                             f"known: {', '.join(sorted(QUESTION_FIELDS))}"))
    qid = rec.get("id")
    if qid is None or str(qid).strip() == "":
        issues.append(LintIssue(src, lineno, "missing id", True))
        return None
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        issues.append(LintIssue(src, lineno, f"id {json.dumps(qid)} must be a string (or a whole number)", True))
        return None
    text = rec.get("question")
    if text is not None and not isinstance(text, str):
        issues.append(LintIssue(src, lineno, f"question {qid!r}: the question {json.dumps(text)} must be a string "
                                             "(put it in quotes)", True))
        return None
    if not isinstance(text, str) or not text.strip():
        issues.append(LintIssue(src, lineno, f"question {qid!r} is empty", True))
        return None
    if _SURROGATE.search(text + str(qid)):
        issues.append(LintIssue(src, lineno, f"question {qid!r} holds a lone surrogate (an escape such as "
                                             "\\ud800 that is not a Unicode character): fix the text", True))
        return None
    raw = rec.get("relevant", [])
    if not isinstance(raw, list):
        issues.append(LintIssue(src, lineno, "relevant must be a list (empty for an unanswerable question)", True))
        return None
    relevant = []
    for item in raw:
        if isinstance(item, str):
            item = {"doc": item}
        if not isinstance(item, dict) or not isinstance(item.get("doc"), str) or not item["doc"]:
            issues.append(LintIssue(src, lineno, f"relevant entry {item!r} needs a doc", True))
            return None
        bad = set(item) - RELEVANT_FIELDS
        if bad:
            issues.append(LintIssue(src, lineno, f"unknown relevant field(s) {', '.join(sorted(bad))}; "
                                                 f"known: {', '.join(sorted(RELEVANT_FIELDS))}"))
        grade = item.get("grade", 1)
        # Whole numbers, as trec_eval and ranx read them (NaN and infinities are not).
        if isinstance(grade, bool) or not isinstance(grade, (int, float)) or grade != grade \
                or grade in (float("inf"), float("-inf")) or grade < 0 or int(grade) != grade:
            issues.append(LintIssue(src, lineno, f"grade {grade!r} must be a whole number >= 0", True))
            return None
        for key in ("evidence", "section"):
            if key in item and (not isinstance(item[key], str) or not item[key].strip()):
                issues.append(LintIssue(src, lineno, f"{key} {item[key]!r} must be a non-empty string", True))
                return None
        relevant.append(Relevant(item["doc"], float(grade), item.get("evidence"), item.get("section")))
    tags = rec.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        issues.append(LintIssue(src, lineno, "tags must be a list of strings", True))
        return None
    if relevant and not any(r.grade >= 1 for r in relevant):
        issues.append(LintIssue(src, lineno, f"question {qid!r}: every relevant entry has grade 0, so it counts "
                                             "as unanswerable (use an empty list to say so)"))
    return Question(str(qid), text.strip(), relevant, list(tags), lineno)


def _from_queries_and_qrels(name: str, queries: Path, qrels: Path) -> QuestionSet:
    qs = QuestionSet(name, [])
    texts: dict[str, tuple[str, int]] = {}
    for lineno, line in _lines(queries):
        if not line.strip():
            continue
        if queries.suffix == ".jsonl":
            try:
                rec = json.loads(line)
                texts[str(rec["_id"])] = (str(rec["text"]), lineno)
            except (ValueError, KeyError, TypeError):
                raise InputError(f"{queries}:{lineno}: expected a BEIR query {{\"_id\", \"text\"}}") from None
        else:
            qid, sep, text = line.rstrip("\n").partition("\t")
            if not sep:
                raise InputError(f"{queries}:{lineno}: expected 'query-id<TAB>text'")
            texts[qid] = (text, lineno)
    judged: dict[str, dict[str, float]] = {}
    for lineno, (qid, doc, grade) in _read_qrels(qrels):
        judged.setdefault(qid, {})[doc] = grade
    for qid, rels in judged.items():
        if not any(g >= 1 for g in rels.values()):
            continue  # judged, nothing relevant: not a question to score (as BEIR and ranx do)
        if qid not in texts:
            qs.issues.append(LintIssue(str(qrels), None, f"query {qid!r} is judged but has no text in {queries.name}"))
            continue
        text, lineno = texts[qid]
        if not text.strip():
            qs.issues.append(LintIssue(str(queries), lineno, f"query {qid!r} is empty: give it a text or drop its judgements"))
            continue
        relevant = [Relevant(doc, grade) for doc, grade in sorted(rels.items())]
        qs.questions.append(Question(qid, text, relevant, [], lineno))
    # BEIR evaluates judged queries only; unjudged queries are not questions.
    order = {q: texts[q][1] for q in texts}
    qs.questions.sort(key=lambda q: order.get(q.id, 0))
    if not qs.questions:
        raise InputError(f"{qrels}: no judged queries match {queries.name}")
    return qs


def _read_qrels(path: Path):
    """BEIR TSV (query-id, corpus-id, score, with a header) or TREC (qid 0 docid rel)."""
    for lineno, line in _lines(path):
        parts = line.split()
        if not parts:
            continue
        if lineno == 1 and parts[0] in ("query-id", "query_id", "qid"):
            continue
        if len(parts) == 3:
            qid, doc, grade = parts
        elif len(parts) == 4:
            qid, _, doc, grade = parts
        else:
            raise InputError(f"{path}:{lineno}: expected 'qid docid grade' (BEIR) or 'qid 0 docid grade' (TREC)")
        try:
            value = float(grade)
        except ValueError:
            value = -1.0
        if not value.is_integer() or value < 0:
            raise InputError(f"{path}:{lineno}: grade {grade!r} must be a whole number >= 0")
        yield lineno, (qid, doc, value)


def lint_against_store(qs: QuestionSet, store, visible: set[str] | None = None) -> None:
    """Add issues for documents the store does not hold and evidence no document contains.
    ``visible``: the documents the caller may see (``access.visible_documents``; None:
    all); any other document reads exactly as one the store does not hold."""
    docs = set(store.document_ids())
    if visible is not None:
        docs &= visible
    texts: dict[str, str] = {}  # raw document text, fetched once per document
    for q in qs.questions:
        for r in q.relevant:
            if r.doc not in docs:
                qs.issues.append(LintIssue(qs.source or qs.name, q.line, f"question {q.id!r} names document {r.doc!r}, "
                                                           "which the store does not hold"))
                continue
            if r.evidence:
                if r.doc not in texts:
                    texts[r.doc] = store.document_text(r.doc)
                if not contains_evidence(texts[r.doc], r.evidence):
                    qs.issues.append(LintIssue(qs.source or qs.name, q.line, f"question {q.id!r}: evidence {r.evidence!r} "
                                                               f"does not occur in {r.doc}"))


def lint_questions(qs: QuestionSet, store, contracts, principal=None, allow=None, strict: bool = False) -> None:
    """Lint ``qs`` against ``store`` as the caller sees it under every contract of ``contracts`` (a
    restricted caller's lint sees only its documents: any other reads as one the store lacks); an
    InputError for fatal issues (with ``strict``, for any issue). Eval and calibrate run this first."""
    from ..access import visible_documents

    seen = [visible_documents(store, c, principal, allow) for c in contracts]
    seen = [v for v in seen if v is not None]
    lint_against_store(qs, store, set.intersection(*seen) if seen else None)
    fatal = [i for i in qs.issues if i.fatal or strict]
    if fatal:
        raise InputError(f"{len(fatal)} problem(s) in the question set, first: {fatal[0]}")


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")


@lru_cache(maxsize=4096)
def evidence_regex(evidence: str) -> re.Pattern | None:
    """Match evidence as whole words in order, ignoring case and any punctuation or markup
    between them (Markdown, table pipes, CSV commas); CJK characters are words of their own."""
    tokens = _TOKEN.findall(evidence)
    if not tokens:
        return None
    cjk = [bool(re.match(f"[{_CJK}]", t)) for t in tokens]
    parts = ["" if cjk[0] else r"(?<![^\W_])"]
    for i, tok in enumerate(tokens):
        if i:
            parts.append(r"[\W_]*" if cjk[i] or cjk[i - 1] else r"[\W_]+")
        parts.append(re.escape(tok))
    parts.append("" if cjk[-1] else r"(?![^\W_])")
    return re.compile("".join(parts), re.IGNORECASE)


def contains_evidence(text: str, evidence: str) -> bool:
    pattern = evidence_regex(evidence)
    return bool(pattern and pattern.search(text))


def trec_id(unit: str) -> str:
    """TREC files are whitespace-separated: spaces in document paths become %20."""
    return unit.replace("%", "%25").replace(" ", "%20").replace("\t", "%09")


def write_trec_qrels(path: Path, qrels: dict[str, dict[str, float]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for qid, rels in qrels.items():
            for doc, grade in rels.items():
                fh.write(f"{trec_id(qid)} 0 {trec_id(doc)} {int(grade) if float(grade).is_integer() else grade}\n")


__all__ = ["Question", "QuestionSet", "Relevant", "LintIssue", "load_questions", "lint_against_store"]
