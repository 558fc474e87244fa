"""The documentation agrees with the program: the README and the docs/ site.

- Every command has a page, and the page's generated reference is what `kbtool CMD --help` prints.
- Every option of every command is explained somewhere in the prose (not only in the generated
  table), and every ``kbtool CMD … --option`` the prose shows is an option ``CMD`` has: a renamed or
  removed option fails here.
- The contract reference lists every key of the contract.
- Numbers the docs quote from the sample set are the set's and a run's (`<!-- checked: sample-eval -->`).
- `mkdocs build --strict` builds the site (slow).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("kbtool_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def pages() -> dict[Path, str]:
    """README.md and every page of the site (not the hook, not work in progress under _incoming/)."""
    found = {ROOT / "README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for path in sorted(DOCS.rglob("*.md")):
        if "_incoming" not in path.parts:
            found[path] = path.read_text(encoding="utf-8")
    return found


def command_page(path: str) -> Path:
    name = path.split()[0]
    return DOCS / "commands" / ("index-cmd.md" if name == "index" else f"{name}.md")


# ---- commands ------------------------------------------------------------------------------------
def test_every_command_has_a_page_with_its_generated_reference():
    paths = hooks.command_paths()
    assert {"ingest", "query", "eval", "calibrate", "serve", "contract init"} <= set(paths)
    for path in paths:
        page = command_page(path)
        assert page.exists(), f"kbtool {path}: no page {page.relative_to(ROOT)}"
        assert f"<!-- kbtool:help {path} -->" in page.read_text(encoding="utf-8"), \
            f"{page.relative_to(ROOT)} lacks <!-- kbtool:help {path} -->"


def test_the_generated_reference_is_what_help_prints():
    """Each option line of `kbtool CMD --help` (run as a user runs it) is a row of the page's table."""
    from typer.testing import CliRunner

    from kbtool.cli import app

    for path in hooks.command_paths():
        table = hooks.help_markdown(path)
        r = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        for option in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", r.stdout)) - {"--help"}:
            if option in hooks.options_of(path):
                assert re.search(rf"\| `[^`]*{re.escape(option)}\b", table), f"kbtool {path}: {option} not in its reference"


def _prose(text: str) -> str:
    return hooks.HELP.sub("", text)


def test_every_option_is_explained_in_the_prose():
    """Not only generated: each option is named in hand-written text somewhere in the docs."""
    prose = "\n".join(_prose(t) for t in pages().values())
    missing = [f"kbtool {path} {option}" for path in hooks.command_paths()
               for option in sorted(hooks.options_of(path)) if option.startswith("--") and option not in prose]
    assert not missing, f"options no page explains: {missing}"


COMMAND_LINE = re.compile(r"kbtool((?: [a-z]+){1,2})\b((?:(?!kbtool )[^\n`|])*)")


def _command_uses(text: str):
    """(command path, option) for each `kbtool CMD … --option` in a page (code lines, inline code)."""
    known = set(hooks.command_paths())
    # a command continued over lines with a trailing backslash is one line
    text = re.sub(r"\\\n\s*", " ", text)
    for m in COMMAND_LINE.finditer(text):
        words = m.group(1).split()
        path = " ".join(words[:2]) if " ".join(words[:2]) in known else words[0]
        if path not in known:
            continue
        rest = m.group(2)
        rest = re.split(r"\s(?:&&|\|\||;|\|)\s|#", rest)[0]  # up to the next command or comment
        for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
            yield path, option


def test_every_option_the_docs_show_exists():
    """`kbtool eval … --fail-under-recorded`: the docs may only show options the command has."""
    bad = []
    for page, text in pages().items():
        for path, option in _command_uses(_prose(text)):
            options = hooks.options_of(path) | {"--help", "--version", "--store"}
            if option not in options:
                bad.append(f"{page.relative_to(ROOT)}: kbtool {path} {option}")
    assert not bad, "the docs show options the command does not have:\n" + "\n".join(sorted(set(bad)))


def test_a_renamed_option_would_be_caught():
    assert list(_command_uses("kbtool eval q.jsonl --fail-under-recordd 0.02 && kbtool ingest --json")) == [
        ("eval", "--fail-under-recordd"), ("ingest", "--json")]
    assert "--fail-under-recordd" not in hooks.options_of("eval")


# ---- the contract --------------------------------------------------------------------------------
def test_the_contract_reference_names_every_key_of_the_contract():
    from kbtool.contract.schema import default_contract

    table = hooks.contract_markdown()
    keys = set(re.findall(r"^\| `([^`]+)`", table, re.M))

    def walk(value, prefix):
        if isinstance(value, dict):
            for key, sub in value.items():
                path = f"{prefix}{key}"
                generic = re.sub(r"^data\.metadata\.[^.]+", "data.metadata.NAME", path)
                generic = re.sub(r"^decide\.tiers\.[^.]+", "decide.tiers.NAME", generic)
                generic = re.sub(r"^retrieve\.rules\.\d+", "retrieve.rules[]", generic)
                if re.search(r"\.(coefficients|thesaurus|weights|principals|fitted_on)\.", generic):
                    continue  # maps of free names
                if not generic.endswith(".NAME"):  # an entry of a map: its keys are checked below
                    assert generic in keys, f"contract key {path} missing from the reference"
                walk(sub, path + ".")
        elif isinstance(value, list):
            for i, sub in enumerate(value):
                walk(sub, f"{prefix[:-1]}.{i}.")

    walk(default_contract().to_dict(), "")
    assert "retrieve.top_k" in keys and "decide.thresholds.answer" in keys
    assert "contract.md" and "<!-- kbtool:contract-reference -->" in (DOCS / "contract.md").read_text(encoding="utf-8")


# ---- the sample set's numbers --------------------------------------------------------------------
def test_question_counts_quoted_for_the_sample_set_are_the_sets():
    from kbtool.evaluation.questions import load_questions

    qs = load_questions(ROOT / "eval_sets" / "sample.jsonl").questions
    answerable = sum(1 for q in qs if q.answerable)
    counts = (len(qs), answerable, len(qs) - answerable)
    quoted = [(page, tuple(int(x) for x in m))
              for page, text in pages().items()
              for m in re.findall(r"sample: (\d+) questions \((\d+) answerable, (\d+) unanswerable\)", text)]
    assert quoted, "no page quotes the sample set's size"
    for page, found in quoted:
        assert found == counts, f"{page.relative_to(ROOT)} quotes {found}, the set has {counts}"


CHECKED = re.compile(r"<!-- checked: sample-eval -->\n(\|.*?)\n\n", re.S)


def checked_tables() -> list[tuple[Path, list[str], list[tuple[str, list[str]]]]]:
    tables = []
    for page, text in pages().items():
        for m in CHECKED.finditer(text + "\n\n"):
            lines = [line for line in m.group(1).splitlines() if not line.startswith("| ---")]
            head = [c.strip() for c in lines[0].strip("|").split("|")]
            rows = [(cells[0], cells[1:]) for cells in
                    ([c.strip().strip("*") for c in line.strip("|").split("|")] for line in lines[1:])]
            tables.append((page, head[1:], rows))
    return tables


def test_the_checked_tables_are_well_formed():
    tables = checked_tables()
    assert tables, "no <!-- checked: sample-eval --> table"
    for page, modes, rows in tables:
        assert modes and rows, page
        for label, cells in rows:
            assert re.fullmatch(r"[a-z_]+(@\d+)?( \[[\w-]+\])?", label), (page, label)
            assert len(cells) == len(modes) and all(re.fullmatch(r"\d\.\d{3}", c) for c in cells), (page, label)


@pytest.mark.slow
def test_the_sample_numbers_the_docs_quote_are_a_runs(sample_store, tmp_path):
    """The demo's store (MiniLM + use-m), `kbtool eval` as the README shows it: every number of
    every checked table is within 0.0015 of this run's."""
    store = tmp_path / "kb"
    shutil.copytree(sample_store.path, store)
    from kbtool.store import Store
    import kbtool.index

    s = Store.open(store)
    s.add_model("use-m")
    kbtool.index.index(s)
    modes = sorted({m for _, ms, _ in checked_tables() for m in ms})
    r = subprocess.run([sys.executable, "-m", "kbtool", "eval", str(ROOT / "eval_sets" / "sample.jsonl"), "--store",
                        str(store), "--modes", ",".join(modes), "--json", "-q"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads(r.stdout)
    wrong = []
    for page, ms, rows in checked_tables():
        for label, cells in rows:
            metric, _, tag = label.partition(" [")
            for mode, cell in zip(ms, cells):
                if metric in ("correct_refusal", "false_refusal"):
                    actual = run["refusal"][mode][metric]
                elif tag:
                    actual = run["by_tag"][tag.rstrip("]")]["metrics"][mode][metric]
                else:
                    actual = run["metrics"][mode][metric]
                if abs(actual - float(cell)) > 0.0015:
                    wrong.append(f"{page.relative_to(ROOT)}: {label} {mode}: docs {cell}, run {actual:.4f}")
    assert not wrong, "\n".join(wrong)


# ---- the site ------------------------------------------------------------------------------------
def test_every_page_is_in_the_nav():
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)

    def leaves(nav):
        for item in nav:
            if isinstance(item, str):
                yield item
            else:
                for value in item.values():
                    yield from ([value] if isinstance(value, str) else leaves(value))

    listed = set(leaves(config["nav"]))
    for path in pages():
        if path.parent != ROOT:
            assert str(path.relative_to(DOCS)) in listed, f"{path.relative_to(ROOT)} is not in mkdocs.yml's nav"


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-4000:]
    page = (tmp_path / "site" / "commands" / "eval" / "index.html").read_text(encoding="utf-8")
    assert "--fail-under-recorded" in page and "kbtool:help" not in page  # the reference was generated
    contract = (tmp_path / "site" / "contract" / "index.html").read_text(encoding="utf-8")
    assert "retrieve.top_k" in contract and "decide.thresholds.answer" in contract


def test_the_mcp_client_configurations_start_a_server_kbtool_has():
    """Each `<!-- mcp-config -->` snippet is valid JSON whose args are `kbtool serve` options."""
    text = (DOCS / "commands" / "serve.md").read_text(encoding="utf-8")
    snippets = re.findall(r"<!-- mcp-config -->\n```json\n(.*?)```", text, re.S)
    assert len(snippets) >= 2
    options = hooks.options_of("serve")
    for snippet in snippets:
        config = json.loads(snippet)
        (server,) = (config.get("mcpServers") or config["servers"]).values()
        assert server["command"].endswith("kbtool")
        args = server["args"]
        assert args[:3] == ["serve", "--mcp", "stdio"], args
        assert {a for a in args if a.startswith("--")} <= options, args
