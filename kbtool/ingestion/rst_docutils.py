"""docutils set up as kbtool reads Sphinx pages (``rst._kit``): the directives and roles, the state
classes that run them, an inliner for unknown roles, the settings. Imported only when an ``.rst``
page is parsed, so docutils never loads otherwise."""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes, utils
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Directive, Parser, roles, states
from docutils.readers.standalone import Reader
from docutils.statemachine import StringList

from .rst import (ADMONITION_LABELS, CODE_DIRECTIVES, CODE_ROLES, HIDDEN_DIRECTIVES, LINE_LIMIT, VERSION_LABELS,
                  _Context, _select, _Silent)


class AnyOptions(dict):
    """Every option accepted (and kept as written): Sphinx's and extensions' options never fail."""

    def __missing__(self, key):
        return lambda value: value

    def __bool__(self):
        return True


def where(d, lineno: int) -> tuple[str | None, int | None]:
    return d.state_machine.get_source_and_line(lineno)


def ctx_of(d) -> _Context:
    return d.state.document.settings.kbtool_context


def paragraph(d, text: str, lineno: int, inline: bool = True):
    if inline:
        parsed, _ = d.state.inline_text(text, lineno)
        p = nodes.paragraph(text, "", *parsed)
    else:
        p = nodes.paragraph(text, text)
    p.source, p.line = where(d, lineno)
    return p


def captioned(d, block) -> list:
    """A code block, after its ``:caption:`` (a line of text of its own) when it has one."""
    if not d.options.get("caption"):
        return [block]
    at = next((k for k, line in enumerate(d.block_text.split("\n")) if line.strip().startswith(":caption:")), 0)
    return [nodes.container("", paragraph(d, str(d.options["caption"]), d.lineno + at), block,
                            classes=["literal-block-wrapper"])]


class Generic(Directive):
    """A directive docutils does not know: its arguments as a line, its content parsed."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = AnyOptions()

    def run(self):
        box = nodes.container(classes=["kbtool-directive"], directive=self.name)
        if self.arguments:
            args = paragraph(self, " ".join(self.arguments[0].split()), self.lineno, inline=False)
            args.rawsource = self.arguments[0]  # its lines
            box += args
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, box)
        return [box]


class GenericNoArguments(Generic):
    optional_arguments = 0  # the lines right below are content, not arguments


class Hidden(Generic):
    def run(self):
        return []


class CodeBlock(Generic):
    def run(self):
        lang = CODE_DIRECTIVES.get(self.name.lower())
        if lang is None:  # else an argument is not the language (doctest's group name)
            lang = (self.arguments[0].split() or [""])[0] if self.arguments else ""
        code = "\n".join(self.content)
        block = nodes.literal_block(code, code, language=lang)
        block.source, block.line = where(self, self.content_offset + 1)
        return captioned(self, block)


class Include(Generic):
    required_arguments = 1
    optional_arguments = 0

    def run(self):
        ctx = ctx_of(self)
        source, line = where(self, self.lineno)
        target = self.arguments[0].strip()
        if target.startswith("<") and target.endswith(">"):
            return self.standard(target[1:-1])
        got = ctx.read(target, source)
        if got is None:
            return []
        path, lines, parent = got
        picked = _select(lines, self.options)
        if not picked:
            return []
        if "literal" in self.options or "code" in self.options or self.name == "literalinclude":
            return self.literal(ctx, path, picked)
        name = ctx.register(path, lines, parent, line or 0)
        body = StringList([t for _, t in picked], items=[(name, n - 1) for n, _ in picked])
        body.append("", name, picked[-1][0])
        sm = self.state_machine
        sm.input_lines.insert(sm.line_offset + 1, body)
        return []

    def literal(self, ctx: _Context, path: Path, picked: list):
        code = "\n".join(t for _, t in picked)
        if self.options.get("dedent") is not None or self.name == "literalinclude":
            import textwrap

            code = textwrap.dedent(code)
        lang = self.options.get("language") or self.options.get("code") or ""
        if not lang and self.name == "literalinclude":
            lang = {".py": "python", ".js": "javascript", ".json": "json", ".toml": "toml", ".yaml": "yaml",
                    ".yml": "yaml", ".sh": "bash", ".html": "html", ".c": "c", ".rs": "rust"}.get(path.suffix, "")
        block = nodes.literal_block(code, code, language=str(lang).strip())
        block.source, block.line = where(self, self.lineno)
        block["kbtool_source"] = [{"path": ctx.shown(path), "lines": [picked[0][0], picked[-1][0]]}]
        return captioned(self, block)

    def standard(self, name: str):
        """docutils' own substitution sets (``<isonum.txt>``): read from docutils, never the disk's
        other folders."""
        from docutils.parsers.rst.directives.misc import Include as Standard

        base = Standard.standard_include_path.resolve()
        path = (base / name).resolve()
        if not path.is_relative_to(base) or not path.is_file():
            return []
        lines = path.read_text(encoding="utf-8").split("\n")
        self.state_machine.insert_input(lines, str(path))
        return []


class Toctree(Generic):
    optional_arguments = 0

    def run(self):
        if "hidden" in self.options:
            return []
        out = []
        if self.options.get("caption"):
            out.append(paragraph(self, str(self.options["caption"]), self.lineno))
        items = nodes.bullet_list()
        for k, entry in enumerate(self.content):
            entry = entry.strip()
            m = re.match(r"^(.+?)\s*<([^<>]+)>$", entry)
            text = m.group(1) if m else entry
            if not text or text == "self" or (not m and any(c in text for c in "*?[")):
                continue  # the page itself, or a glob Sphinx expands
            items += nodes.list_item("", paragraph(self, text, self.content_offset + k + 1, inline=False))
        return out + ([items] if len(items) else [])


class VersionChange(Generic):
    required_arguments = 1
    optional_arguments = 1

    def run(self):
        label = VERSION_LABELS[self.name.lower()] + " " + self.arguments[0]
        box = nodes.admonition(classes=["kbtool-label"], label=label)
        box.source, box.line = where(self, self.lineno)
        if len(self.arguments) > 1:  # on the directive's line, or (Sphinx) from the next one
            own_line = len(self.block_text.split("\n")[0].split("::", 1)[-1].split()) > 1
            box += paragraph(self, self.arguments[1], self.lineno + (0 if own_line else 1))
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, box)
        return [box]


class Labelled(Generic):
    optional_arguments = 0  # text on the directive's line is content, as in an admonition

    def run(self):
        box = nodes.admonition(classes=["kbtool-label"], label=ADMONITION_LABELS[self.name.lower()])
        box.source, box.line = where(self, self.lineno)
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, box)
        return [box]

ours = {**{k: CodeBlock for k in CODE_DIRECTIVES}, **{k: Hidden for k in HIDDEN_DIRECTIVES},
        **{k: VersionChange for k in VERSION_LABELS}, **{k: Labelled for k in ADMONITION_LABELS},
        "include": Include, "literalinclude": Include, "toctree": Toctree,
        "class": Generic}  # Sphinx's Python class (docutils' own class directive is rst-class there)
directive_line = re.compile(r"\.\.[ ]+(%s)[ ]?::( +|$)" % states.Inliner.simplename)


class Runs:
    """Mixed into docutils' states: Sphinx's directives, and a generic one for any other; nested
    parses use these states too (and a cache of nested machines of their own)."""

    nested_sm_cache: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.nested_sm_kwargs = {**self.nested_sm_kwargs, "state_classes": state_classes}

    def run_directive(self, directive, match, type_name, option_presets):
        made, blank = super().run_directive(ours.get(type_name.lower(), directive), match, type_name,
                                            option_presets)
        end = self.state_machine.get_source_and_line(self.state_machine.abs_line_number())
        for node in made:  # where a table directive ends (a csv-table's cells carry no lines of the page)
            if isinstance(node, nodes.table):
                node["kbtool_end"] = end
        return made, blank

    def unknown_directive(self, type_name):
        match = directive_line.match(self.state_machine.line)
        if match is None:
            return super().unknown_directive(type_name)
        cls = ours.get(type_name.lower()) or (Generic if match.string[match.end():].strip() else GenericNoArguments)
        return self.run_directive(cls, match, type_name, {})

state_classes = tuple(type(c.__name__, (Runs, c), {}) for c in states.state_classes)


def sphinx_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    text = utils.unescape(text)
    m = re.match(r"^(.+?)\s*<([^<>]+)>$", text, re.DOTALL)
    text = m.group(1) if m else text.lstrip("~!")
    if name.lower() == "doc" and not m:
        text = text.lstrip("/")
    if name.lower() in ("ref", "std:ref") and not m:  # the section's title, when it is on this page
        return [nodes.inline(rawtext, text, kbtool_ref=" ".join(text.lower().split()))], []
    code = name.lower() in CODE_ROLES or ":" in name
    return [nodes.literal(rawtext, text) if code else nodes.inline(rawtext, text)], []


def interpreted(inliner, rawsource, text, role, lineno):
    """docutils' own roles as docutils reads them; any other as ``sphinx_role``."""
    fn, messages = roles.role(role, inliner.language, lineno, inliner.reporter)
    out, more = (fn or sphinx_role)(role, rawsource, text, lineno, inliner)
    return out, messages + more


class RstParser(Parser):
    def __init__(self):
        import types

        # An instance's method: docutils builds an Inliner's patterns from its class's own dict.
        inliner = states.Inliner()
        inliner.interpreted = types.MethodType(interpreted, inliner)
        super().__init__(inliner=inliner)
        self.state_classes = state_classes

settings = get_default_settings(RstParser, Reader)  # defaults only: no docutils.conf is read
# Sphinx's reading of a page (no document title taken out of the sections, "id1" ids), silent,
# no file or URL read by docutils' own directives, code not tokenized, text as written.
for key, value in {"report_level": 5, "halt_level": 5, "warning_stream": _Silent(),
                   "file_insertion_enabled": False, "raw_enabled": True, "doctitle_xform": False,
                   "sectsubtitle_xform": False, "auto_id_prefix": "id", "syntax_highlight": "none",
                   "smart_quotes": False, "pep_references": False, "rfc_references": False,
                   "line_length_limit": LINE_LIMIT, "character_level_inline_markup": False}.items():
    setattr(settings, key, value)


def kit():
    return nodes, utils, RstParser, Reader, settings, roles
