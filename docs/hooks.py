"""MkDocs hook: the parts of the docs that are generated, so they cannot drift from the code.

- ``<!-- kbtool:help COMMAND -->`` (``COMMAND`` as typed, e.g. ``ingest`` or ``contract init``)
  becomes the command's usage line and options table, read from the Typer app itself.
- ``<!-- kbtool:contract-reference -->`` becomes the reference of every contract key, read from
  the contract's pydantic models (their types, defaults and descriptions).

``tests/test_docs.py`` imports the same functions to hold the hand-written pages to the app.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

HELP = re.compile(r"<!-- kbtool:help ([a-z][a-z -]*?) -->")
CONTRACT = "<!-- kbtool:contract-reference -->"


# ---- commands ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def click_app():
    import typer.main

    from kbtool.cli import app

    return typer.main.get_command(app)


def find_command(path: str):
    """The click command for ``"ingest"`` or ``"contract init"``."""
    command = click_app()
    for name in path.split():
        if not _is_group(command) or name not in command.commands:
            raise KeyError(f"no command 'kbtool {path}'")
        command = command.commands[name]
    return command


def command_paths() -> list[str]:
    """Every command a user can run (``contract init``, not the group ``contract``)."""
    paths = []

    def walk(group, prefix):
        for name, cmd in sorted(group.commands.items()):
            if getattr(cmd, "hidden", False):
                continue
            if _is_group(cmd):
                walk(cmd, prefix + [name])
            else:
                paths.append(" ".join(prefix + [name]))

    walk(click_app(), [])
    return paths


def options_of(path: str) -> set[str]:
    """Every long and short option spelling of a command (``--store``, ``-q``), ``--help`` aside."""
    names = set()
    for p in find_command(path).params:
        if _is_option(p):
            names.update(p.opts + p.secondary_opts)
    return names - {"--help"}


# Typer carries its own copy of click (typer._click): ask the objects what they are.
def _is_group(command) -> bool:
    return hasattr(command, "commands")


def _is_option(param) -> bool:
    return param.param_type_name == "option"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def help_markdown(path: str) -> str:
    """The usage line, summary and a table of every argument and option of ``kbtool PATH``."""
    command = find_command(path)
    ctx = command.context_class(command, info_name=f"kbtool {path}")
    usage = " ".join(command.collect_usage_pieces(ctx))
    summary = (command.help or "").strip()
    lines = ["**Reference** (generated from `kbtool " + path + " --help`):", "",
             "```text", f"kbtool {path} {usage}".rstrip(), "```", ""]
    if summary:
        lines += [summary.replace("\n\n", "\n\n"), ""]
    lines += ["| argument or option | meaning |", "| --- | --- |"]
    for p in command.params:
        record = p.get_help_record(ctx)  # what --help prints for it: (spelling with metavar, help)
        if record is None or "--help" in getattr(p, "opts", ()):
            continue
        spell, text = record
        lines.append(f"| `{spell}` | {_cell(text)} |")
    return "\n".join(lines) + "\n"


# ---- the contract --------------------------------------------------------------------------------
def contract_markdown() -> str:
    """Every key of kbtool.yaml, one row each: dotted path, type, default, meaning."""
    from pydantic import BaseModel

    from kbtool.contract.schema import Contract

    rows: list[tuple[str, str, str, str]] = []

    def walk(model: type[BaseModel], prefix: str):
        for name, field in model.model_fields.items():
            key = field.alias or name
            path = f"{prefix}{key}"
            nested = _model_of(field.annotation)
            default = "" if field.is_required() else _shown_default(field)
            rows.append((path, _type_name(field.annotation), default, field.description or ""))
            if nested is not None:
                walk(nested, path + _container_mark(field.annotation) + ".")

    walk(Contract, "")
    out = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    out += [f"| `{p}` | {_cell(t)} | {_cell(d)} | {_cell(m)} |" for p, t, d, m in rows]
    return "\n".join(out) + "\n"


def _model_of(annotation):
    """The pydantic model a field holds directly, or through Optional / list / dict values."""
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _container_mark(annotation) -> str:
    """``[]`` for a list of sections (``data.sources[].root``), ``.NAME`` for a map of them."""
    import typing

    for arg in [annotation, *typing.get_args(annotation)]:
        origin = typing.get_origin(arg)
        if origin in (list, tuple):
            return "[]"
        if origin is dict:
            return ".NAME"
    return ""


def _type_name(annotation) -> str:
    import typing

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names)
    if origin in (list, tuple, set):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[1])}" if len(args) == 2 else "map"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, "mapping" if hasattr(annotation, "model_fields") else annotation.__name__)
    return str(annotation).replace("typing.", "")


def _shown_default(field) -> str:
    try:
        value = field.get_default(call_default_factory=True)
    except TypeError:
        value = field.get_default()
    if hasattr(value, "model_dump"):
        return "(section)"
    if isinstance(value, dict) and any(hasattr(v, "model_dump") for v in value.values()):
        return ", ".join(value)
    if value in ({}, []) or value is None:
        return "none" if value is None else json.dumps(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return str(value)


# ---- the MkDocs hook -----------------------------------------------------------------------------
def render(markdown: str) -> str:
    """A page's Markdown with every generated part filled in."""
    markdown = HELP.sub(lambda m: help_markdown(m.group(1)), markdown)
    if CONTRACT in markdown:
        markdown = markdown.replace(CONTRACT, contract_markdown())
    return markdown


def on_page_markdown(markdown, page=None, config=None, files=None, **kwargs):
    return render(markdown)
