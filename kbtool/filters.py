"""Metadata filters: one small syntax for --filter and the contract's ``retrieve.filters``.

    dir=policies            equality (a tags field matches when it holds the tag)
    dir=docs/en/**          glob: * within a path segment, ** across segments (prefix match)
    doc_type=faq|guide      any of these values
    doc_type!=draft         not equal
    updated>=2024-01-01     comparison: dates, numbers, or text, by the field's type in the data spec

Filters decide which chunks both retrievers may return, before fusion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import cached_property

_SPEC = re.compile(r"^\s*(?P<key>[\w.-]+)\s*(?P<op>!=|>=|<=|=|>|<)\s*(?P<value>.*?)\s*$", re.S)
SYNTAX = "key=value, key=a|b, key=dir/** (glob), key!=value, key>=value, key<=value, key>value or key<value"


@dataclass(frozen=True)
class Filter:
    key: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"

    @cached_property
    def values(self) -> list[str]:
        return [v.strip() for v in self.value.split("|")] if self.op in ("=", "!=") else [self.value]

    @cached_property
    def _globs(self) -> list[re.Pattern | None]:
        return [_glob(v) if any(c in v for c in "*?[") else None for v in self.values]

    def matches(self, meta: dict, ftype: str = "str") -> bool:
        raw = meta.get(self.key)
        if self.op in ("=", "!="):
            if raw is None:
                hit = False
            else:
                have = [t.strip() for t in str(raw).split(",")] if ftype == "tags" else [str(raw)]
                hit = any((g.fullmatch(h) if g else h == v) for v, g in zip(self.values, self._globs) for h in have)
            return hit if self.op == "=" else not hit
        if raw is None:
            return False
        a, b = _comparable(str(raw), ftype), _comparable(self.value, ftype)
        if type(a) is not type(b):
            a, b = str(raw), self.value
        return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[self.op]


def parse_filter(spec: str) -> Filter:
    """Parse one filter; raises ValueError with the syntax when it is malformed."""
    m = _SPEC.match(spec or "")
    if not m or not m["value"]:
        raise ValueError(f"filter {spec!r}: write {SYNTAX}")
    return Filter(m["key"], m["op"], m["value"])


def _glob(pattern: str) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")  # docs/en/** also matches docs/en itself
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.S)


def _comparable(text: str, ftype: str):
    if ftype in ("number", "str"):
        try:
            return float(text)
        except ValueError:
            if ftype == "number":
                return text
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return parsed.replace(tzinfo=None)
    except ValueError:
        pass
    try:
        return datetime.combine(date.fromisoformat(text), datetime.min.time())
    except ValueError:
        return text
