"""reStructuredText (Sphinx sources) through docutils: a page becomes Blocks with source lines.

docutils parses the page (imported only here, when an ``.rst`` file is parsed) with a setup of its
own: no configuration file is read, no message reaches standard error, nothing is written, nothing
is fetched (``file_insertion_enabled`` off: ``raw``/``csv-table`` never read a file or URL). What
Sphinx adds to reStructuredText is kept as text, never an error:

* Sphinx roles (``:func:`x```, ``:class:``, ``:ref:`text <label>```, ``:doc:``, any unknown role)
  become their text: code-like roles (``func``, ``class``, ``meth``, domain roles ``py:…``) as
  ```x```, the others as plain text (the explicit title of ``text <target>``);
* ``code-block``/``sourcecode``/``code`` (any option), ``testcode``, ``doctest``… are code blocks;
  ``versionadded``/``versionchanged``/``deprecated``/``versionremoved`` and ``seealso`` read like
  admonitions ("Added in version 2.0: …"); ``toctree`` entries are list items (a hidden toctree
  shows nothing, as on the site); directives that render nothing (``index``, ``module``,
  ``currentmodule``, ``highlight``…) go;
* any other directive (``autofunction``, ``py:function``, ``tab``, extensions') keeps its
  arguments as a line of text and its content, parsed as reStructuredText;
* ``include`` and ``literalinclude`` read only files under the ingest root or the include root,
  with the rules of Markdown includes (``includes.read_include``); a block made of included lines
  is cited at the directive's line, with the included file's own lines (``Block.source``).

Blocks: sections nest into the section path (each title block's anchor is the id docutils — and
so Sphinx — gives the section, ``ids[0]``); paragraphs, definitions, fields, footnotes → ``text``;
each list item → ``list``; literal blocks fenced with their language → ``code``; tables → one row
per line, cells joined with `` | ``; admonitions keep their label at the start of the body. A
field list before anything else is the page's metadata (Sphinx shows it nowhere either).

``sphinx_base_url`` reads ``html_baseurl`` from a ``conf.py`` with ``ast`` (never executed).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..document import Block
from ..errors import ParseError
from .includes import read_include

# Roles Sphinx renders as code (any domain role, ``py:func``, is code too).
CODE_ROLES = {"func", "meth", "class", "attr", "exc", "data", "obj", "mod", "const", "type", "any", "code", "file",
              "samp", "envvar", "option", "program", "command", "kbd", "makevar", "regexp", "token", "keyword",
              "member", "var", "macro", "struct", "union", "enum", "enumerator", "expr", "texpr"}
# Directives whose content is code (None: the language is the directive's argument).
CODE_DIRECTIVES = {"code-block": None, "sourcecode": None, "code": None, "testcode": "python", "testoutput": "",
                   "doctest": "pycon", "ipython": "ipython", "jupyter-execute": "python", "prompt": ""}
# Directives a Sphinx site shows nothing of.
HIDDEN_DIRECTIVES = {"index", "module", "currentmodule", "py:module", "py:currentmodule", "c:namespace",
                     "cpp:namespace", "highlight", "default-domain", "sectionauthor", "moduleauthor",
                     "codeauthor", "tabularcolumns", "testsetup", "testcleanup", "todolist"}
VERSION_LABELS = {"versionadded": "Added in version", "versionchanged": "Changed in version",
                  "deprecated": "Deprecated since version", "versionremoved": "Removed in version"}
ADMONITION_LABELS = {"seealso": "See also", "todo": "Todo"}
LINE_LIMIT = 100_000  # characters on one line docutils parses (its own default, 10,000, drops the page)
INCLUDE_DEPTH = 8
_LOCK = threading.Lock()  # docutils keeps roles a page defines (``.. role::``) in a module-level table


@dataclass
class RstParsed:
    """A page's blocks and what parse_file records beside them (the shape of ``markup.Cleaned``)."""

    blocks: list[Block]
    title: str | None = None
    metadata: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    includes: dict = field(default_factory=dict)  # included file -> sha256 ("" when it was missing)
    missing_includes: list = field(default_factory=list)


@dataclass
class _Included:
    shown: str  # the file as citations name it
    path: Path
    page_line: int  # the line of the page's directive that brought it (the outermost one)
    chain: tuple  # the files included on the way, outermost first
    lines: list[str]


class _Context:
    """One page's parse: where includes may read, what they brought."""

    def __init__(self, page: str, lines: list[str], doc_path: Path | None, ingest_root: Path | None,
                 include_root: Path | None, excluded):
        self.page, self.page_lines, self.doc_path, self.excluded = page, lines, doc_path, excluded
        self.ingest_root = ingest_root.resolve() if ingest_root else None
        self.include_root = include_root.resolve() if include_root else self.ingest_root
        self.included: dict[str, _Included] = {}  # source name docutils carries -> where it came from
        self.result = RstParsed([])

    def shown(self, path: Path) -> str:
        for r in (self.ingest_root, self.include_root):
            if r is not None and path.is_relative_to(r):
                return path.relative_to(r).as_posix()
        return path.as_posix()

    def srcdir(self) -> Path | None:
        """The Sphinx source folder (the nearest ``conf.py`` above the page), where ``/path`` resolves."""
        if self.doc_path is None:
            return self.ingest_root
        d = self.doc_path.resolve().parent
        while self.ingest_root is not None and d.is_relative_to(self.ingest_root):
            if (d / "conf.py").is_file():
                return d
            if d == self.ingest_root:
                break
            d = d.parent
        return self.ingest_root

    def read(self, target: str, source: str | None) -> tuple[Path, list[str], _Included | None] | None:
        """(path, lines, the include it sits in) of a file an include directive names, or None
        (missing, outside the roots, excluded: counted and recorded)."""
        stats = self.result.stats
        parent = self.included.get(source or "")
        here = parent.path.parent if parent else (self.doc_path.parent if self.doc_path else None)
        if target.startswith("/"):  # Sphinx: relative to the source folder
            here, target = self.srcdir(), target.lstrip("/")
        missing: list[str] = []
        found = read_include(target, here, self.include_root, self.ingest_root, self.excluded, missing)
        if found is not None and parent is not None and (str(found[0]) in parent.chain or len(parent.chain) >= INCLUDE_DEPTH):
            found = None  # a file including itself, or includes too deep
        key = "includes_resolved" if found is not None else "includes_missing"
        stats[key] = stats.get(key, 0) + 1
        if found is None:
            for path in missing:
                self.result.includes.setdefault(path, "")
            where = f" (in {parent.shown})" if parent else ""
            self.result.missing_includes.append(target + where)
            return None
        path, body = found
        self.result.includes[str(path)] = hashlib.sha256(body.encode("utf-8")).hexdigest()
        return path, body.rstrip("\n").split("\n"), parent

    def register(self, path: Path, lines: list[str], parent: _Included | None, page_line: int) -> str:
        """The source name docutils carries for lines of ``path`` brought by this directive."""
        name = f"{path}#kbtool-include-{len(self.included) + 1}"
        self.included[name] = _Included(self.shown(path), path, parent.page_line if parent else page_line,
                                        (parent.chain if parent else ()) + (str(path),), lines)
        return name

    def lines_of(self, source: str | None) -> list[str] | None:
        if source == self.page:
            return self.page_lines
        inc = self.included.get(source or "")
        return inc.lines if inc else None


def _select(lines: list[str], options: dict) -> list[tuple[int, str]]:
    """(line number, line) that ``include``/``literalinclude`` options keep: ``lines``,
    ``start-line``/``end-line``, ``start-after``/``start-at``, ``end-before``/``end-at``."""
    numbered = list(enumerate(lines, start=1))
    if options.get("pyobject"):
        span = _pyobject(lines, str(options["pyobject"]))
        if span:
            numbered = numbered[span[0] - 1:span[1]]
    if options.get("lines"):
        keep: set[int] = set()
        for part in str(options["lines"]).replace(" ", "").split(","):
            a, _, b = part.partition("-")
            if a.isdigit() or b.isdigit():
                keep.update(range(int(a or 1), (int(b) if b else (len(lines) if _ else int(a))) + 1))
        numbered = [(n, t) for n, t in numbered if n in keep]
    if options.get("start-line") is not None or options.get("end-line") is not None:
        numbered = numbered[int(options.get("start-line") or 0):options.get("end-line")]
    for key, after in (("start-after", True), ("start-at", False)):
        if options.get(key):
            at = next((k for k, (_, t) in enumerate(numbered) if options[key] in t), None)
            if at is not None:
                numbered = numbered[at + 1 if after else at:]
    for key, before in (("end-before", True), ("end-at", False)):
        if options.get(key):
            at = next((k for k, (_, t) in enumerate(numbered) if options[key] in t), None)
            if at is not None:
                numbered = numbered[:at if before else at + 1]
    return numbered


def _pyobject(lines: list[str], name: str) -> tuple[int, int] | None:
    """The lines (decorators included) of a Python class or function, ``Class.method`` (literalinclude's
    ``:pyobject:``), found with ``ast``; None when the file does not parse or holds no such object."""
    import ast

    try:
        body = ast.parse("\n".join(lines)).body
    except (SyntaxError, ValueError):
        return None
    node = None
    for part in name.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == part), None)
        if node is None:
            return None
        body = node.body
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return first, node.end_lineno or node.lineno


@lru_cache(maxsize=1)
def _kit():
    """docutils, set up once (``rst_docutils``, imported with the first ``.rst`` page): the directives
    and roles kbtool reads Sphinx pages with, the state classes that run them, the settings."""
    from .rst_docutils import kit

    return kit()


def parse_rst(text: str, *, doc_path: Path | None = None, ingest_root: Path | None = None,
              include_root: Path | None = None, excluded=None) -> RstParsed:
    """Blocks of a reStructuredText page (``text``, decoded). Includes read only under
    ``ingest_root`` or ``include_root`` (none without an ingest root)."""
    import copy

    nodes, utils, RstParser, Reader, defaults, roles = _kit()
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    page = str(doc_path) if doc_path is not None else "<page>"
    ctx = _Context(page, text.split("\n"), doc_path, ingest_root, include_root, excluded)
    long = next((n for n, line in enumerate(ctx.page_lines, start=1) if len(line) > LINE_LIMIT), None)
    if long:
        raise ParseError(f"line {long} has {len(ctx.page_lines[long - 1])} characters, over the {LINE_LIMIT} "
                         "docutils reads in one line: break it")
    settings = copy.copy(defaults)
    settings.kbtool_context = ctx
    parser = RstParser()
    document = utils.new_document(page, settings)
    with _LOCK:
        saved = dict(roles._roles)
        try:
            parser.parse(text, document)
            document.transformer.populate_from_components((Reader(parser=parser), parser))
            document.transformer.apply_transforms()
        finally:
            roles._roles.clear()
            roles._roles.update(saved)
    from .doctree import Walk

    walk = Walk(nodes, ctx, document)
    walk.run(document)
    out = ctx.result
    out.blocks = walk.blocks
    out.metadata = walk.metadata
    out.title = next((" ".join(b.text.split()) for b in walk.blocks if b.kind == "title" and b.depth == 0), None)
    return out


class _Silent:
    """Where docutils' messages go (none reach it: report_level 5)."""

    def write(self, *args):
        return 0

    def flush(self):
        pass


def sphinx_base_url(conf: Path) -> str | None:
    """``html_baseurl`` of a Sphinx ``conf.py``, read with ``ast`` (the file is never run): a string
    written as a literal (the last one assigned), with a trailing ``/``; None when there is none,
    it is computed, or the file does not parse."""
    import ast

    try:
        tree = ast.parse(conf.read_bytes(), filename=str(conf))
    except (OSError, SyntaxError, ValueError):
        return None
    url = None
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "html_baseurl" for t in targets):
            value = getattr(stmt, "value", None)
            url = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    if not url or not url.startswith(("http://", "https://")):
        return None
    return url if url.endswith("/") else url + "/"


def sphinx_sites(root: Path, files) -> dict[str, str | None]:
    """The Sphinx projects the ``.rst`` files belong to: {folder of the nearest ``conf.py`` at or
    above each (relative to ``root``, "" for the root itself): its html_baseurl, or None}. Only
    folders under ``root`` are looked at."""
    root = Path(root).resolve()
    conf_of: dict[Path, Path | None] = {}  # folder -> the folder of its nearest conf.py

    def nearest(d: Path) -> Path | None:
        if d not in conf_of:
            conf_of[d] = d if (d / "conf.py").is_file() else (
                nearest(d.parent) if d != root and d.parent.is_relative_to(root) else None)
        return conf_of[d]

    sites: dict[str, str | None] = {}
    for f in files:
        if f.suffix.lower() != ".rst" or not f.parent.is_relative_to(root):
            continue
        d = nearest(f.parent)
        if d is not None:
            rel = d.relative_to(root).as_posix()
            if rel == ".":
                rel = ""
            if rel not in sites:
                sites[rel] = sphinx_base_url(d / "conf.py")
    return sites
