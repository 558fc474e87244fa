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


def store_fingerprint(store, contract=None, principal: str | None = None, allow=None) -> dict:
    """What a calibration was computed on. For a restricted caller (``principal``/``allow`` under
    ``contract``'s access clause) the document and chunk counts are those it may see, and
    ``access`` records its tags, so counts are only ever compared within the same scope."""
    from ..access import restricted_status

    info = store.status() if contract is None else restricted_status(store, contract, principal, allow)
    out = {"model": store.model_id, "chunking": store.manifest.get("chunking"),
           "analyzer": info.get("analyzer"), "documents": info["documents"], "chunks": info["chunks"]}
    if info.get("access") is not None:
        out["access"] = info["access"]
    return out


def visible_appendix(appendix, contract, principal: str | None = None, allow=None) -> dict:
    """The calibration appendix (a ``CalibrationRecord``) as a caller may see it, a mapping: a
    restricted caller gets the store counts only when they were recorded under its own tags."""
    from ..access import access_tags

    tags = access_tags(contract, principal, allow)
    store = appendix.store or {}
    if tags is None or store.get("access") == sorted(tags):
        return appendix.to_dict()
    return {**appendix.to_dict(), "store": {k: v for k, v in store.items() if k not in ("documents", "chunks")}}


def calibration_warnings(contract, store, qs, principal: str | None = None, allow=None) -> list[str]:
    """Why the contract's calibration may not hold for this store or question set (empty: it does).
    Document and chunk counts are compared only when recorded under the caller's own access scope."""
    cal = contract.calibration
    if not cal:
        return []
    out = []
    record = cal.question_set or {}
    if question_set_changed(record, qs):
        out.append("the question set differs from the one the contract was calibrated on "
                   f"({record.get('path') or 'unknown'}): recalibrate with `kbtool calibrate`")
    then, now = cal.store or {}, store_fingerprint(store, contract, principal, allow)
    keys = STORE_KEYS if then.get("access") == now.get("access") else [k for k in STORE_KEYS if k not in ("documents", "chunks")]
    changed = [k for k in keys if k in then and then[k] != now[k]]
    if changed:
        out.append(f"the store changed since calibration ({', '.join(changed)}): recalibrate with `kbtool calibrate`")
    return out
