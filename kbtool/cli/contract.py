from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import app
from ._common import ContractOpt, JsonOpt, SetOpt, StoreOpt, err, handle_errors, load_contract_opt, open_store, print_json

contract_app = typer.Typer(help="Write, show and check the retrieval contract (kbtool.yaml).", no_args_is_help=True)
app.add_typer(contract_app, name="contract")


@contract_app.command("init")
@handle_errors
def init(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="Where to write it.")] = Path("kbtool.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    schema: Annotated[bool, typer.Option("--schema", help="Also write the JSON Schema beside it (kbtool.schema.json) and a first line pointing editors at it: # yaml-language-server: $schema=kbtool.schema.json.")] = False,
):
    """Write the built-in contract, every key commented, to edit and commit beside your code."""
    from ..contract import default_contract, dump_yaml
    from ..contract.schema import SCHEMA_FILE
    from ..errors import InputError

    if path.exists() and not force:
        raise InputError(f"{path} exists: pass --force to overwrite it, or give another path")
    head = f"# yaml-language-server: $schema={SCHEMA_FILE}\n" if schema else ""
    written = [_write(path.parent / SCHEMA_FILE, _schema_text())] if schema else []
    written.insert(0, _write(path, head + dump_yaml(default_contract())))
    err.print(f"wrote {', '.join(map(str, written))}", highlight=False, markup=False)


@contract_app.command("schema")
@handle_errors
def schema(
    out_: Annotated[Optional[Path], typer.Option("--out", metavar="FILE", help="Write it to this file (e.g. kbtool.schema.json) instead of stdout.")] = None,
):
    """Print the JSON Schema of kbtool.yaml, for editors that validate and complete YAML against one
    (yaml-language-server: VS Code's YAML extension, Neovim, Helix)."""
    import sys

    if out_ is None:
        sys.stdout.write(_schema_text())
    else:
        err.print(f"wrote {_write(out_, _schema_text())}", highlight=False, markup=False)


def _schema_text() -> str:
    import json

    from ..contract.schema import json_schema

    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def _write(path: Path, text: str) -> Path:
    from ..errors import InputError

    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror})") from None
    return path


@contract_app.command("show")
@handle_errors
def show(contract: ContractOpt = None, set_: SetOpt = None, json_: JsonOpt = False):
    """Print the effective contract: the file (or the built-in one) with --set overrides applied."""
    import sys

    from ..contract import dump_yaml

    c = load_contract_opt(contract, set_)
    sens = c.postprocess.sensitive
    if sens._written:  # the lexicon as written (relative to the contract's folder), not the absolute path loading made
        c = c.model_copy(update={"postprocess": c.postprocess.model_copy(
            update={"sensitive": sens.model_copy(update={"lexicon": sens._written})})})
    if json_:
        print_json(c.to_dict())
    else:
        sys.stdout.write(dump_yaml(c, comments=False))


@contract_app.command("validate")
@handle_errors
def validate(
    path: Annotated[Optional[Path], typer.Argument(metavar="FILE", help="Contract file [default: as for --contract].")] = None,
    set_: SetOpt = None,
    check_store: Annotated[bool, typer.Option("--check-store", help="Also check the store: required metadata present, filters known.")] = False,
    store: StoreOpt = None,
    json_: JsonOpt = False,
):
    """Check a contract; exit 1 with the first problem (named by its path) if it is invalid."""
    from ..contract import check_against_store, find_contract

    c = load_contract_opt(path, set_)
    problems = check_against_store(c, open_store(store)) if check_store else []
    source = str(find_contract(path) or "the built-in contract")
    if json_:
        print_json({"contract": source, "valid": not problems, "contract_version": c.contract_version,
                    "problems": problems})
    else:
        for p in problems:
            err.print(f"[yellow]problem[/] {p}", highlight=False)
        if not problems:
            err.print(f"{source}: valid (contract_version {c.contract_version})", highlight=False, markup=False)
    if problems:
        raise typer.Exit(1)
