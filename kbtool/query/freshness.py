"""postprocess.freshness: newer documents and sources that disagree.

Two parts, each a step of ``pipeline.answer()``:

- ``decay`` (``half_life_days``), on the fused list before dedup: ``score * 0.5 ** (age / half_life)``,
  age in days from ``as_of`` (default: the newest date among the question's candidates) to the
  document's date; re-sorted ``(-score, id)``.
- ``conflicts`` (``prefer``), after diversity on the hits the decision reads (the contract's
  ``top_k``): two hits of different documents about the same thing (chunk cosine at or above
  ``similarity``, or the same last section heading) whose facts of one kind differ — numbers with
  units, durations, dates, versions (``facts``). ``newer``: the newer document's hit takes the
  older one's place (the older stays, below it); ``score``: the order is kept. Both flag it.

A document's date: the first of ``date_fields`` that gives one — a metadata (front matter) key
that reads as a date, or ``mtime``, the file's modification time when it was ingested (UTC).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from functools import lru_cache

# ---- document dates -------------------------------------------------------------------------


def parse_date(value) -> datetime | None:
    """A metadata value as a UTC datetime: ISO dates and datetimes (``2024-10-02``,
    ``2024-10-02T08:00:00Z``, ``2024-10``), ``October 2, 2024``, ``2 Oct 2024``; else None."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    text = str(value or "").strip()
    if not text:
        return None
    try:
        got = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return got.astimezone(timezone.utc) if got.tzinfo else got.replace(tzinfo=timezone.utc)
    except ValueError:
        pass
    found = _date_facts(text.lower())
    if len(found) == 1 and found[0][2] == text.lower().rstrip("."):
        y, m, d = (int(x) for x in (found[0][1] + "-01").split("-")[:3])
        return datetime(y, m, d, tzinfo=timezone.utc)
    return None


def document_dates(store, doc_ids, fields) -> dict[str, tuple[datetime | None, str | None]]:
    """doc_id -> (its date, where it came from: the metadata key or ``mtime``), (None, None) undated."""
    out = {}
    for doc, (meta, mtime) in store.document_dating(sorted(set(doc_ids))).items():
        got = None
        for k in fields:  # "mtime": the file's modification time when it was ingested, where it is listed
            if k == "mtime" and "mtime" not in meta:
                d = None if mtime is None else datetime.fromtimestamp(float(mtime), tz=timezone.utc)
            else:
                d = parse_date(meta.get(k))
            if d is not None:
                got = (d, k)
                break
        out[doc] = got or (None, None)
    return out


def _day(d: datetime | None) -> str | None:
    return None if d is None else d.date().isoformat()


# ---- facts ----------------------------------------------------------------------------------
_MONTHS = {m[:3]: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"], start=1)}
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
_NUM = r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
_DATES = [
    (re.compile(r"(?<![\d.-])((?:19|20)\d\d)-(0[1-9]|1[0-2])(?:-(0[1-9]|[12]\d|3[01]))?(?![\d-])"), "ymd"),
    (re.compile(r"\b" + _MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+((?:19|20)\d\d)\b", re.I), "mdy"),
    (re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+((?:19|20)\d\d)\b", re.I), "dmy"),
    (re.compile(r"\b" + _MONTH + r",?\s+((?:19|20)\d\d)\b", re.I), "my"),
]
_SECONDS = {u: f for f, units in [
    (0.001, "ms millisecond milliseconds"), (1, "s sec secs second seconds"), (60, "min mins minute minutes"),
    (3600, "h hr hrs hour hours"), (86400, "d day days"), (604800, "wk wks week weeks"),
    (2592000, "mo mos month months"), (31536000, "y yr yrs year years")] for u in units.split()}
_DURATION = re.compile(_NUM + r"(?:\s*|-)(" + "|".join(sorted(_SECONDS, key=len, reverse=True)) + r")\b", re.I)
_BYTES = {"byte": 1, "kb": 1e3, "kib": 1024, "mb": 1e6, "mib": 1024 ** 2, "gb": 1e9, "gib": 1024 ** 3,
          "tb": 1e12, "tib": 1024 ** 4, "pb": 1e15}
_SIZE = re.compile(_NUM + r"\s*(bytes?|kb|kib|mb|mib|gb|gib|tb|tib|pb)\b", re.I)
_PERCENT = re.compile(_NUM + r"\s*(%|percent\b|per cent\b)", re.I)
_CURRENCY = {"$": "usd", "usd": "usd", "dollar": "usd", "dollars": "usd", "€": "eur", "eur": "eur", "euro": "eur",
             "euros": "eur", "£": "gbp", "gbp": "gbp"}
_MONEY = [re.compile(r"([$€£])\s?" + _NUM), re.compile(_NUM + r"\s*(usd|eur|gbp|dollars?|euros?)\b", re.I)]
_VERSION = [re.compile(r"(?<![\w.])v(\d+(?:\.\d+)+)\b(?!\.\d)", re.I),
            re.compile(r"\b(?:version|release)\s+v?(\d+(?:\.\d+)*)\b(?!\.\d)", re.I),
            re.compile(r"(?<![\w.])(\d+\.\d+\.\d+)\b(?!\.\d)")]
_TRAILING_ZEROS = re.compile(r"(?<=\d)(?:\.0+)+$")
_COUNT = re.compile(_NUM + r"\s+([a-z]{3,})\b", re.I)
# Words a number is often followed by that are not what it counts.
_NOT_UNITS = frozenset(
    "and are but can for from has have into its more not now only per than that the their then these this "
    "those was were when which will with times out off over under".split())


def _negative(text: str, start: int) -> bool:
    """A minus sign just before ``start`` that is no range (5-10%) or compound (90-day): after a
    space, an opening bracket or the start of the text."""
    return start > 0 and text[start - 1] in "-\u2212" and (start == 1 or text[start - 2] in " \t\n(")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _shown(text: str) -> str:
    return " ".join(text.split())


def _date_facts(low: str) -> list[tuple[tuple[int, int], str, str]]:
    """[(span, ISO date or year-month, text)] of the dates in lowercased ``low``."""
    out, taken = [], []
    months = _MONTH_HINT.search(low) is not None
    for rx, form in _DATES:
        if form != "ymd" and not months:  # the patterns with a month name: only where one may be
            continue
        for m in rx.finditer(low):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            g = m.groups()
            if form == "ymd":
                iso = f"{g[0]}-{g[1]}" + (f"-{g[2]}" if g[2] else "")
            elif form == "mdy":
                iso = f"{g[2]}-{_MONTHS[g[0][:3]]:02d}-{int(g[1]):02d}"
            elif form == "dmy":
                iso = f"{g[2]}-{_MONTHS[g[1][:3]]:02d}-{int(g[0]):02d}"
            else:
                iso = f"{g[1]}-{_MONTHS[g[0][:3]]:02d}"
            taken.append(m.span())
            out.append((m.span(), iso, m.group(0)))
    return out


_DIGIT = re.compile(r"\d")
_MONTH_HINT = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)")
# Each pattern only where a word it needs occurs (a pass over the text each costs more than this).
_NEEDS = {id(_VERSION[1]): ("version", "release"), id(_PERCENT): ("%", "per"), id(_MONEY[0]): ("$", "€", "£"),
          id(_MONEY[1]): ("usd", "eur", "gbp", "dollar")}


def _scan(rx, low: str):
    need = _NEEDS.get(id(rx))
    return rx.finditer(low) if need is None or any(w in low for w in need) else ()


@lru_cache(maxsize=20000)
def facts(text: str) -> dict[str, dict]:
    """The checkable facts of a text by kind: ``date``, ``duration``, ``size``, ``percent``,
    ``money:<currency>``, ``version``, ``count:<word>`` (a number and the word after it), each
    {normalised value: the text as written, first occurrence}. A bare number is no fact: two texts
    are never in conflict merely for holding different numbers. Durations compare in seconds (90
    days = 3 months), sizes in bytes, so one thing written two ways is one value. Cached by text:
    callers must not change what it returns."""
    if not _DIGIT.search(text):  # every fact holds a digit
        return {}
    low = text.lower()
    found: list[tuple[tuple[int, int], str, object, str]] = []  # (span, kind, value, shown)
    spans: list[tuple[int, int]] = []

    def free(span) -> bool:
        return not any(a < span[1] and span[0] < b for a, b in spans)

    def add(span, kind, value, shown):
        if kind != "date" and kind != "version" and _negative(text, span[0]):  # -5%, -10 degrees, -$3
            span, value = (span[0] - 1, span[1]), -value
        if free(span):
            spans.append(span)
            found.append((span, kind, value, _shown(text[span[0]:span[1]]) if shown is None else shown))

    for span, iso, _ in _date_facts(low):
        add(span, "date", iso, None)
    for rx in _VERSION:
        for m in _scan(rx, low):  # 2, 2.0 and 2.0.0 are one version
            add(m.span(), "version", _TRAILING_ZEROS.sub("", m.group(1)), None)
    for m in _scan(_DURATION, low):
        add(m.span(), "duration", round(_number(m.group(1)) * _SECONDS[m.group(2)], 6), None)
    for m in _scan(_SIZE, low):
        unit = m.group(2)
        add(m.span(), "size", round(_number(m.group(1)) * _BYTES.get(unit, _BYTES.get(unit.rstrip("s"), 1)), 3), None)
    for m in _scan(_PERCENT, low):
        add(m.span(), "percent", _number(m.group(1)), None)
    for m in _scan(_MONEY[0], low):
        add(m.span(), "money:" + _CURRENCY[m.group(1)], _number(m.group(2)), None)
    for m in _scan(_MONEY[1], low):
        add(m.span(), "money:" + _CURRENCY[m.group(2)], _number(m.group(1)), None)
    for m in _scan(_COUNT, low):
        word = m.group(2)
        if word in _NOT_UNITS or not free(m.span()):
            continue
        add(m.span(), "count:" + (word[:-1] if word.endswith("s") and len(word) > 3 else word), _number(m.group(1)), None)
    out: dict[str, dict] = {}
    for span, kind, value, shown in sorted(found, key=lambda f: f[0]):
        out.setdefault(kind, {}).setdefault(value, shown)
    return out


def differ(a: dict[str, dict], b: dict[str, dict]) -> list[list[str]]:
    """[[a's values, b's values]] for each kind both hold where each holds a value the other does
    not (one text saying less is not a conflict); values as written, joined by ', '."""
    out = []
    for kind in sorted(set(a) & set(b)):
        only_a = [s for v, s in a[kind].items() if v not in b[kind]]
        only_b = [s for v, s in b[kind].items() if v not in a[kind]]
        if only_a and only_b:
            out.append([", ".join(only_a), ", ".join(only_b)])
    return out


# ---- time decay -----------------------------------------------------------------------------
_FLOOR = 1e-300  # the smallest decay factor: scores stay finite (a z-score divided by it too)


def decay(fused: list[tuple[str, float]], doc_of, dates: dict, cfg) -> tuple[list, dict]:
    """``fused`` with each score times ``0.5 ** (age / half_life_days)`` (a negative score, of
    z-score fusion, divided by it: older is always lower), re-sorted ``(-score, id)``. Age: days
    from ``as_of`` back to the document's date, never below 0; an undated document is not decayed.
    Returns (items, trace record: ``as_of``, ``decayed`` count, ``moved`` [[chunk id, rank before,
    rank after]] in the new top 20)."""
    known = [d for d, _ in dates.values() if d is not None]
    if cfg.as_of is not None:
        as_of = parse_date(cfg.as_of)
    else:
        as_of = max(known, default=None)
    out, n = [], 0
    for cid, score in fused:
        d = dates.get(doc_of(cid), (None, None))[0]
        if d is None or as_of is None:
            out.append((cid, score))
            continue
        age = max(0.0, (as_of - d).total_seconds() / 86400)
        # floored: 0.5 ** (1095 / 1) underflows to 0.0, and a negative score is divided by it
        f = max(0.5 ** (age / cfg.half_life_days), _FLOOR)
        n += f < 1
        out.append((cid, score * f if score >= 0 else score / f))
    before = {c: i for i, (c, _) in enumerate(fused, start=1)}
    out.sort(key=lambda x: (-x[1], x[0]))
    moved = [[c, before[c], r] for r, (c, _) in enumerate(out[:20], start=1) if before[c] != r]
    return out, {"as_of": _day(as_of), "half_life_days": cfg.half_life_days, "decayed": n, "moved": moved}


# ---- conflicts ------------------------------------------------------------------------------


HEADING_SLACK = 0.2  # two hits under the same last heading are "about the same thing" from cosine similarity - 0.2


def _heading(section_path: str | None) -> str:
    return (section_path or "").split(">")[-1].strip().lower()


def conflicts(items: list[tuple[str, float]], rows: dict, vectors: dict, dates: dict, cfg) -> tuple[list, list, dict]:
    """Find and (``prefer: newer``) resolve conflicts among ``items`` (chunk id, score), best first;
    ``rows``: chunk rows by id (``text``, ``doc_id``, ``section_path``); ``vectors``: chunk id ->
    vector (None: similar by heading alone; with vectors a shared heading lowers the cosine bar by HEADING_SLACK); ``dates``: ``document_dates``.

    Returns (items, conflicts, trace record). One conflict per pair of documents (their
    best-ranked pair of hits): {newer, older (chunk ids), newer_doc, older_doc, newer_date,
    older_date (YYYY-MM-DD or None), differ [[newer's values, older's values]]}; with equal or
    unknown dates ``newer`` is the better-ranked hit. ``newer``: the hits in conflict, taken
    together with every hit they conflict with, are put back in the places they held, newest
    first (undated last, ties in rank order); nothing is dropped."""
    import numpy as np

    n = len(items)
    ids = [c for c, _ in items]
    doc = [rows[c]["doc_id"] for c in ids]
    when = [dates.get(d, (None, None))[0] for d in doc]
    fx = [facts(rows[c]["text"]) for c in ids]
    vecs = [vectors.get(c) for c in ids]
    heads = [_heading(rows[c].get("section_path")) for c in ids]
    found, pairs, seen = [], [], set()
    for i in range(n):
        for j in range(i + 1, n):
            key = tuple(sorted((doc[i], doc[j])))
            if doc[i] == doc[j] or key in seen or not fx[i] or not fx[j]:
                continue
            same = bool(heads[i]) and heads[i] == heads[j]
            if vecs[i] is not None and vecs[j] is not None:
                a, b = np.asarray(vecs[i], dtype=np.float64), np.asarray(vecs[j], dtype=np.float64)
                na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
                cos = float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0
                # a shared heading ("Limits", "Overview") alone is too common: it lowers the bar, no more
                same = cos >= cfg.similarity - (HEADING_SLACK if same else 0.0)
            if not same:
                continue
            newer, older = (j, i) if when[i] is not None and when[j] is not None and when[j] > when[i] else (i, j)
            d = differ(fx[newer], fx[older])
            if not d:
                continue
            seen.add(key)
            pairs.append((i, j))
            found.append({"newer": ids[newer], "older": ids[older], "newer_doc": doc[newer], "older_doc": doc[older],
                          "newer_date": _day(when[newer]), "older_date": _day(when[older]), "differ": d})
    moved: list = []
    if cfg.prefer == "newer" and pairs:
        parent = list(range(n))

        def root(k):
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k

        for i, j in pairs:
            parent[root(i)] = root(j)
        order = list(range(n))
        groups: dict[int, list[int]] = {}
        for k in sorted({k for p in pairs for k in p}):
            groups.setdefault(root(k), []).append(k)
        for members in groups.values():
            best = sorted(members, key=lambda k: (when[k] is None, -(when[k].timestamp() if when[k] else 0), k))
            for place, k in zip(members, best):
                order[place] = k
        moved = [[ids[k], k + 1, r] for r, k in enumerate(order, start=1) if k + 1 != r]
        items = [items[k] for k in order]
    return items, found, {"prefer": cfg.prefer, "similarity": cfg.similarity, "conflicts": found, "moved": moved}
