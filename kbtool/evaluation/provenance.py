"""Where a result came from: fingerprints of a question set and of a store, recorded by
``calibrate`` in the contract's appendix and checked again by ``eval``.

A question set has two: ``sha256``, of the file's bytes (what ``sha256sum`` prints; none for a
BEIR folder), and ``questions_fingerprint``, of its parsed content (ids, questions, labels, tags),
which is what decides whether a calibration still holds: reformatting the file changes the first,
not the second. Appendices written before the two were separated hold the content fingerprint
under ``sha256``; ``question_set_changed`` reads both forms.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

STORE_KEYS = ("model", "chunking", "analyzer", "documents", "chunks")


def questions_fingerprint(qs) -> str:
    """sha256 over the questions' ids, texts, labels and tags, in order."""
    h = hashlib.sha256()
    for q in qs.questions:
        h.update(repr((q.id, q.question, [(r.doc, r.grade, r.evidence, r.section) for r in q.relevant],
                       sorted(q.tags))).encode())
    return h.hexdigest()


def file_sha256(path: str | Path | None) -> str | None:
    """sha256 of a file's bytes; None for no path, a folder or an unreadable file."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def question_set_record(qs, path: str = "") -> dict:
    """What the calibration appendix records of a question set."""
    answerable = sum(q.answerable for q in qs.questions)
    return {"path": path, "sha256": file_sha256(qs.source or path), "questions_fingerprint": questions_fingerprint(qs),
            "questions": len(qs.questions), "answerable": answerable, "unanswerable": len(qs.questions) - answerable}


def question_set_changed(record: dict, qs) -> bool:
    """Whether ``qs`` differs in content from the recorded question set (old and new appendices)."""
    recorded = record.get("questions_fingerprint") if "questions_fingerprint" in record else record.get("sha256")
    return bool(recorded) and recorded != questions_fingerprint(qs)


def store_fingerprint(store) -> dict:
    info = store.status()
    return {"model": store.model_id, "chunking": store.manifest.get("chunking"),
            "analyzer": info.get("analyzer"), "documents": info["documents"], "chunks": info["chunks"]}


def calibration_warnings(contract, store, qs) -> list[str]:
    """Why the contract's calibration may not hold for this store or question set (empty: it does)."""
    cal = contract.calibration
    if not cal:
        return []
    out = []
    record = cal.get("question_set") or {}
    if question_set_changed(record, qs):
        out.append("the question set differs from the one the contract was calibrated on "
                   f"({record.get('path') or 'unknown'}): recalibrate with `kbtool calibrate`")
    then, now = cal.get("store") or {}, store_fingerprint(store)
    changed = [k for k in STORE_KEYS if k in then and then[k] != now[k]]
    if changed:
        out.append(f"the store changed since calibration ({', '.join(changed)}): recalibrate with `kbtool calibrate`")
    return out
