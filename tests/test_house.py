"""The house table (docs/house.md) is the layout as it stands: every module of ``kbtool/`` is named in
it (and nothing else), no file is longer than its row allows, no import runs from a floor up to a
higher one, and the functions of the rooms that regrew before stay short. Pure reading of files:
no model, no store."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "kbtool"
# Rooms whose functions must stay under 100 lines (the renovation of issue 31 split them).
SHORT_FUNCTIONS = ("query", "contract", "cli", "serve")


def _house_rows() -> list[dict]:
    section = (ROOT / "docs" / "house.md").read_text(encoding="utf-8")
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].isdigit():
            continue
        floor, rooms, modules, limit, _ = cells
        overrides = {m: int(n) for m, n in re.findall(r"`(\w+)` \(at most (\d+)\)", modules)}
        names = re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", modules))
        rows.append({"floor": int(floor), "rooms": re.findall(r"`([\w.]+/?)`", rooms), "modules": names,
                     "limit": int(limit), "overrides": overrides})
    assert rows, "docs/house.md: the house table is missing"
    return rows


def _files_of(rows) -> dict[Path, tuple[int, int]]:
    """Each file the table names: (floor, lines at most)."""
    files: dict[Path, tuple[int, int]] = {}
    for row in rows:
        packages = [r for r in row["rooms"] if r.endswith("/")]
        assert len(packages) <= 1, f"one package per row: {row['rooms']}"
        for room in row["rooms"]:
            if room.endswith(".py"):
                files[PKG / room] = (row["floor"], row["limit"])
        for name in row["modules"]:
            assert packages, f"modules listed on a row without a package: {row['rooms']}"
            path = PKG / packages[0] / f"{name}.py"
            assert path not in files, f"{path.relative_to(ROOT)} named twice"
            files[path] = (row["floor"], row["overrides"].get(name, row["limit"]))
    return files


def test_the_table_names_every_module_and_nothing_else():
    files = _files_of(_house_rows())
    actual = set(PKG.rglob("*.py"))
    missing = sorted(str(p.relative_to(ROOT)) for p in actual - set(files))
    extra = sorted(str(p.relative_to(ROOT)) for p in set(files) - actual)
    assert not missing, f"the house table (docs/house.md) does not name: {missing}"
    assert not extra, f"the house table (docs/house.md) names files that do not exist: {extra}"


def test_no_file_is_longer_than_its_row_allows():
    over = []
    for path, (_, limit) in _files_of(_house_rows()).items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            over.append(f"{path.relative_to(ROOT)}: {n} lines > {limit}")
    assert not over, over


def _module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def _imports(path: Path) -> set[Path]:
    """The kbtool files ``path`` imports (at module level or inside functions)."""
    rel = list(path.relative_to(ROOT).with_suffix("").parts)
    package = rel[:-1]
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            targets = [module] + [module + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".") for a in node.names]
        for parts in targets:
            if parts and parts[0] == "kbtool":
                target = _module_file(parts)
                if target is not None and target != path:
                    found.add(target)
    return found


def test_no_import_runs_up_a_floor():
    files = _files_of(_house_rows())
    up = []
    for path, (floor, _) in files.items():
        for target in _imports(path):
            if target.name == "__init__.py" and target.parent == PKG:
                continue  # ``kbtool`` itself: the face, read for its lazy names only
            if files[target][0] > floor:
                up.append(f"{path.relative_to(ROOT)} (floor {floor}) imports "
                          f"{target.relative_to(ROOT)} (floor {files[target][0]})")
    assert not up, up


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_functions_of_the_renovated_rooms_stay_short():
    long = [f"{p.relative_to(ROOT)}:{name} {n} lines"
            for room in SHORT_FUNCTIONS for p in sorted((PKG / room).rglob("*.py"))
            for name, n in _functions(p) if n > 100]
    assert not long, long
    answer = dict(_functions(PKG / "query" / "pipeline.py"))["answer"]
    assert answer <= 60, f"query/pipeline.py:answer is {answer} lines (at most 60: a stage belongs in query/stages.py)"


def test_the_checks_can_fail(tmp_path, monkeypatch):
    """The table parser finds what the other tests rely on (a rule over no rows passes anything)."""
    rows = _house_rows()
    assert len(rows) >= 10 and any(r["overrides"] for r in rows)
    files = _files_of(rows)
    assert files[PKG / "store" / "__init__.py"][1] == 250
    assert files[PKG / "query" / "stages.py"][0] > files[PKG / "store" / "catalog.py"][0]
    assert PKG / "store" / "catalog.py" in _imports(PKG / "store" / "__init__.py")
