"""What parsing hands to chunking, and what a chunk embeds: the shapes both sides share.

``ingestion`` produces ``ParsedDocument``s of ``Block``s; the store keeps the blocks; ``chunk``
turns them into chunks whose embedded (and BM25-indexed) text is ``embed_text(prefix, text)``.
This module imports nothing of kbtool, so every room may use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Block:
    kind: str  # title | text | list | table | code
    text: str
    section: list[str] = field(default_factory=list)
    page: int | None = None
    depth: int | None = None
    lines: tuple[int, int] | None = None  # first and last source line (text formats)
    anchor: str | None = None  # a heading's anchor id (title blocks)
    # lines an include brought in: [{"path": included file, "lines": [first, last]}] (None: none)
    source: list | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        if data["source"] is None:
            del data["source"]  # blocks stored before includes were cited are unchanged
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Block":
        data = dict(data)
        if data.get("lines") is not None:
            data["lines"] = tuple(data["lines"])
        return cls(**data)


@dataclass
class ParsedDocument:
    doc_id: str
    filetype: str
    title: str
    blocks: list[Block]
    sha256: str
    size: int
    mtime: float | None = None
    path: str = ""
    metadata: dict = field(default_factory=dict)  # from the document itself (front matter)
    markup_stats: dict = field(default_factory=dict)
    includes: dict = field(default_factory=dict)  # included file -> sha256
    missing_includes: list = field(default_factory=list)  # include directives whose file was not found

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


def embed_text(prefix: str, text: str) -> str:
    """What is embedded and BM25-indexed for a chunk: its title/section prefix, then its text."""
    return f"{prefix}\n\n{text}" if prefix else text


# Metadata keys kbtool sets on every chunk; a document's own metadata may not use them.
RESERVED_META = {"doc_id", "filetype", "dir", "page", "index_hash"}


def check_metadata_keys(metadata: dict) -> None:
    from .errors import UsageError

    bad = (RESERVED_META & set(metadata)) | {k for k in metadata if str(k).startswith("chroma:")}
    if bad:
        raise UsageError(f"metadata key(s) {', '.join(sorted(bad))} are set by kbtool: choose other names")


def fingerprint(sha256: str, options: str) -> str:
    """What makes a document unchanged: its bytes and the options it was parsed with."""
    return f"{sha256}|{options}"


def path_pattern(pattern: str):
    """``docs/{lang}/**`` -> a regex with a named group per ``{field}`` (``*`` within a folder,
    ``**`` across folders)."""
    import re

    from .errors import UsageError

    if not re.search(r"\{[A-Za-z_]\w*\}", pattern):
        raise UsageError(f"meta_from_path {pattern!r}: name at least one field, e.g. 'docs/{{lang}}/**'")
    out, names = "", set()
    for token in re.split(r"(\{[A-Za-z_]\w*\}|\*\*/?|\*)", pattern):
        if not token:
            continue
        if token.startswith("{"):
            name = token[1:-1]
            if name in names or name in RESERVED_META:
                raise UsageError(f"meta_from_path {pattern!r}: field {name!r} is repeated or reserved")
            names.add(name)
            out += f"(?P<{name}>[^/]+)"
        elif token.startswith("**"):
            out += "(?:.*/)?" if token.endswith("/") else ".*"
        elif token == "*":
            out += "[^/]*"
        else:
            out += re.escape(token)
    return re.compile(out + "$")


def path_metadata(doc_id: str, patterns: list[str]) -> dict:
    meta: dict = {}
    for pattern in patterns:
        m = path_pattern(pattern).match(doc_id)
        if m:
            meta.update({k: v for k, v in m.groupdict().items() if v is not None})
    return meta


def normalise_id_prefix(prefix: str) -> str:
    """'' or a relative path ending in '/' ('zh' -> 'zh/'); ValueError for anything else."""
    p = (prefix or "").strip().replace("\\", "/")
    if not p:
        return ""
    parts = p.strip("/").split("/")
    if p.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"id prefix {prefix!r}: a relative name such as 'zh/' (no '..', no leading '/')")
    return "/".join(parts) + "/"
