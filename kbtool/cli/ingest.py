from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional, Tuple

import typer

from ..ingestion.limits import size_limits_text
from . import app
from ._common import (AddModelOpt, ChromaCollectionOpt, ChromaDatabaseOpt, ChromaTenantOpt, ChromaUrlOpt, chroma_options, ContractOpt, JsonOpt, InputTypeOpt, MaxTokensOpt, ModelOpt, PassagePrefixOpt, QueryPrefixOpt, TokenizerOpt, QuietOpt, StemmerOpt, StoreOpt, WaitOpt, split_add_model, writer_settings, err, handle_errors, open_store, out, parse_pairs,
                      print_json, progress_bars)


@app.command()
@handle_errors
def ingest(
    paths: Annotated[Optional[List[Path]], typer.Argument(metavar="PATH", help="Folders or files to ingest (a folder is mirrored: files gone from it leave the store) [default: the contract's data.sources, else the folders the store was ingested from, with their recorded options].")] = None,
    include: Annotated[Optional[List[str]], typer.Option("--include", "-i", metavar="GLOB", help="Only files matching this glob (repeatable), e.g. '*.md'.")] = None,
    exclude: Annotated[Optional[List[str]], typer.Option("--exclude", "-x", metavar="GLOB", help="Skip files matching this glob (repeatable).")] = None,
    format: Annotated[Optional[str], typer.Option("--format", metavar="FORMAT", help="auto (by extension) or beir (a BEIR folder's corpus.jsonl) [default: auto].")] = None,
    meta: Annotated[Optional[List[str]], typer.Option("--meta", metavar="KEY=VALUE", help="key=value metadata for every document of this folder (repeatable); filterable in query.")] = None,
    id_prefix: Annotated[Optional[str], typer.Option("--id-prefix", metavar="PREFIX", help="Put this before every document id of the folder, e.g. zh/: several folders with the same file names in one store.")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", metavar="URL", help="Site the folder is published under: its citations become BASE/path-without-extension/#anchor.")] = None,
    update_sources: Annotated[bool, typer.Option("--update-sources", help="Change the options the store recorded for a folder (without it, a flag that differs from the record is an error; a flag left out keeps the record).")] = False,
    root_moved: Annotated[Optional[Tuple[Path, Path]], typer.Option("--root-moved", metavar="OLD NEW", help="The folder the store was ingested from moved from OLD to NEW: documents and vectors are re-used (a folder that is gone is taken as moved without it).")] = None,
    contract: ContractOpt = None,
    parse_only: Annotated[bool, typer.Option("--parse-only", help="Stop after parsing: do not chunk or index.")] = False,
    keep_missing: Annotated[bool, typer.Option("--keep-missing", help="Keep documents whose files are gone from the folder.")] = False,
    encoding: Annotated[Optional[str], typer.Option("--encoding", metavar="NAME", help="Decode text files with this encoding instead of detecting it.")] = None,
    max_file_size: Annotated[Optional[float], typer.Option("--max-file-size", metavar="MB", help=f"Skip files larger than this many MB, whatever their type (default, per type: {size_limits_text()}).")] = None,
    parse_timeout: Annotated[Optional[float], typer.Option("--parse-timeout", min=0, metavar="S", help="Stop parsing a file after S seconds and report it failed, so one file cannot hold up the folder (default 120; 0: no limit).")] = None,
    allow_failures: Annotated[int, typer.Option("--allow-failures", min=0, metavar="N", help="Exit 0 even if up to N files fail to parse (default 0: any failure exits 1).")] = 0,
    strict: Annotated[bool, typer.Option("--strict", help="Also exit 1 when a document keeps less of its visible text than the contract's data.min_kept_text (default 0.98); failing on any failed file is the default.")] = False,
    markup_off: Annotated[Optional[List[str]], typer.Option("--markup-off", metavar="RULE", help="Switch off a Markdown clean-up rule (repeatable): front_matter, anchors, admonitions, includes, code_html, diagrams, or all.")] = None,
    include_root: Annotated[Optional[Path], typer.Option("--include-root", metavar="DIR", help="Folder include directives ({* path *}, {!path!}, --8<-- \"path\", <!--@include: path-->) resolve against: inside the ingested folder, or outside it within the same git repository [default: the ingested folder].")] = None,
    meta_from_path: Annotated[Optional[List[str]], typer.Option("--meta-from-path", metavar="PATTERN", help="Metadata from the document path, e.g. 'docs/{lang}/**' gives lang=en (repeatable).")] = None,
    model: ModelOpt = None,
    query_prefix: QueryPrefixOpt = None,
    passage_prefix: PassagePrefixOpt = None,
    max_tokens: MaxTokensOpt = None,
    tokenizer: TokenizerOpt = None,
    input_type: InputTypeOpt = False,
    stemmer: StemmerOpt = None,
    add_model: AddModelOpt = None,
    chroma_url: ChromaUrlOpt = None,
    chroma_tenant: ChromaTenantOpt = None,
    chroma_database: ChromaDatabaseOpt = None,
    chroma_collection: ChromaCollectionOpt = None,
    wait: WaitOpt = 300.0,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Name every skipped file on stderr (by default they are counted by type and reason); with --json, also list the unchanged documents.")] = False,
):
    """Parse documents into the store, then chunk and index what is new or changed.

    Unchanged files (same sha256) are skipped; changed files are re-parsed; files gone from an
    ingested folder are removed from the catalog, Chroma and BM25. The store remembers each folder
    and its options: `kbtool ingest` alone ingests them again as they were.
    """
    from ..errors import NoDocumentsError
    from ..ingestion.pipeline import IngestOptions
    from ..ingestion.pipeline import ingest as run_ingest
    from ..ingestion.prepare import check_request, open_for_ingest

    options = IngestOptions(
        include=include or None, exclude=exclude or None, format=format,
        metadata=parse_pairs(meta, "--meta") if meta else None,
        parse_only=parse_only, keep_missing=keep_missing, encoding=encoding,
        max_file_size=None if max_file_size is None else int(max_file_size * 2**20), markup_off=markup_off or None,
        include_root=str(include_root.resolve()) if include_root else None, meta_from_path=meta_from_path or None,
        id_prefix=id_prefix, base_url=base_url, parse_timeout=parse_timeout,
    )
    paths = list(paths or [])
    check_request(paths, stemmer=stemmer, id_prefix=id_prefix)  # before a store is made
    vectors = chroma_options(chroma_url, chroma_tenant, chroma_database, chroma_collection)  # before a store is made
    declared, min_kept = _declared(contract, store, paths, quiet)
    from ..store import default_store_path

    new_folder = not (store or default_store_path()).exists()  # nothing found to ingest: leave no empty store
    kb, embedder = open_for_ingest(
        store, paths, declared, model=model, query_prefix=query_prefix, passage_prefix=passage_prefix,
        max_tokens=max_tokens, tokenizer=tokenizer, input_type=input_type, stemmer=stemmer, id_prefix=id_prefix,
        vectors=vectors, models=[split_add_model(a) for a in add_model or []], parse_only=parse_only,
        configure=lambda kb: writer_settings(kb, wait, quiet))
    try:
        with progress_bars(quiet) as progress:
            report = run_ingest(kb, paths, options, embedder=embedder, progress=progress, sources=declared,
                                update_sources=update_sources, root_moved=[root_moved] if root_moved else None,
                                min_kept_text=min_kept)
    except NoDocumentsError:
        if new_folder and vectors is None:  # the store this run made holds nothing: take it away again
            import shutil

            kb.close()
            shutil.rmtree(kb.path, ignore_errors=True)
        raise
    hint = None if quiet and not json_ else _multilingual_hint(kb, parse_only)  # said once: where it is seen
    if json_:
        print_json({**report.to_dict(unchanged=verbose), **({"hint": hint} if hint else {})})
    else:
        _render(report, kb.path, quiet, verbose)
        if hint and not quiet:
            err.print(hint, highlight=False, markup=False)
    _exit_on_failures(report, allow_failures, strict, json_)


def _exit_on_failures(report, allow_failures: int, strict: bool, json_: bool) -> None:
    """Exit 1 when more files failed than allowed, or (--strict) a document keeps too little of its text."""
    failed = len(report.failed)
    if failed > allow_failures:
        err.print(f"ingest: {failed} file(s) failed" + (f" (allowed: {allow_failures})" if allow_failures else "")
                  + ": fix them (the reasons are above" + (", all in --json" if not json_ else "")
                  + f"), or accept them with --allow-failures {failed}", highlight=False, markup=False)
        raise typer.Exit(1)
    below = report.kept_text.get("below") or []
    if strict and below:
        err.print(f"ingest: {len(below)} document(s) keep less than {report.kept_text['threshold']:.0%} of their "
                  "visible text (--strict)", highlight=False, markup=False)
        raise typer.Exit(1)


def _declared(contract_opt, store, paths, quiet: bool):
    """(the contract's declared sources (root, options, as written) or None when it declares none,
    its data.min_kept_text). A kbtool.yaml found in the working directory applies only to its own
    store (``ingestion.sources.binds``): for another, said on stderr, neither."""
    from ..contract import contract_named, find_contract, load_contract
    from ..ingestion.pipeline import MIN_KEPT_TEXT
    from ..ingestion.sources import binds, declared_sources

    path = find_contract(contract_opt)
    if path is None:
        return None, MIN_KEPT_TEXT
    contract = load_contract(path)
    if not contract.data.sources:
        return None, contract.data.min_kept_text
    if not contract_named(contract_opt) and not binds(contract, path, store, paths):
        if not quiet:
            from ..store import default_store_path

            err.print(f"note: {path} declares the sources of its own store (.kb beside it, or a store built from "
                      f"them), not of {store or default_store_path()}: not applied to this ingest (name it with "
                      f"--contract {path} to apply it)", highlight=False, markup=False)
        return None, MIN_KEPT_TEXT
    return declared_sources(contract, path), contract.data.min_kept_text


FIRST_FAILURES = 10  # failures named on the terminal; --json lists all


def _render(report, store_path, quiet: bool, verbose: bool = False) -> None:
    from rich.markup import escape

    c = report.to_dict()["counts"]
    line = (f"[bold]{store_path}[/]: {c['added']} added, {c['updated']} updated, {c['unchanged']} unchanged, "
            f"{c['removed']} removed, {c['failed']} failed")
    if c["skipped"]:
        line += f", {c['skipped']} skipped"
    out.print(line, highlight=False)
    for mv in report.moved:
        out.print(f"moved: {mv['documents']} documents now come from {mv['to']} (were {mv['from']})",
                  highlight=False, markup=False)
    for site in report.mkdocs:
        out.print(mkdocs_line(site), highlight=False, markup=False)
        for note in site["notes"]:
            err.print(f"warning: {site['config']}: {note}", highlight=False, markup=False)
    m = report.markup
    if m:
        parts = [f"{m[k]} {label}" for k, label in (
            ("front_matter_invalid", "'---' block(s) that are not YAML (kept as text)"), ("anchors", "heading anchors"),
            ("mkdocs_ids", "heading ids from mkdocs.yml"),
            ("admonitions", "admonitions"), ("includes_resolved", "includes resolved"),
            ("includes_missing", "includes missing (removed)"), ("code_html_lines", "code lines stripped of HTML"),
            ("diagram_lines_dropped", "diagram lines dropped")) if m.get(k)]
        if parts:
            out.print("markup: " + ", ".join(parts), highlight=False, markup=False)
    for miss in report.missing_includes[:FIRST_FAILURES]:
        err.print(f"missing include: {miss['doc_id']} includes {miss['include']!r}, found neither beside it nor "
                  "under the include root: its text is left out (--include-root DIR sets where includes resolve)",
                  highlight=False, markup=False)
    if len(report.missing_includes) > FIRST_FAILURES:
        err.print(f"missing include: … and {len(report.missing_includes) - FIRST_FAILURES} more (`--json` lists "
                  "every one)", highlight=False, markup=False)
    if report.index:
        i = report.index
        out.print(f"index: {i.chunks} chunks, {i.embedded} embedded, {i.from_cache} from cache, "
                  f"{i.upserted} written, {i.deleted} deleted", highlight=False)
    for w in report.warnings:
        err.print(f"warning: {w}", highlight=False, markup=False)
    for line in kept_lines(report.kept_text):
        err.print(line, highlight=False, markup=False)
    for f in report.failed[:FIRST_FAILURES]:
        err.print(f"[red]failed[/] {escape(f['doc_id'])}: {escape(f['reason'])}", highlight=False)
    if len(report.failed) > FIRST_FAILURES:
        err.print(f"[red]failed[/] … and {len(report.failed) - FIRST_FAILURES} more (`--json` lists every one)",
                  highlight=False)
    if not quiet:
        for line in skipped_lines(report.skipped_by_reason(), verbose):
            err.print(line, style="dim", highlight=False, markup=False)


FEW_SKIPPED = 3  # a reason with more skipped files than this is one line (the first few named); -v names all
TYPES_SHOWN = 8  # extensions named in the line of unsupported files


def skipped_lines(by_reason: dict[str, list[str]], verbose: bool = False) -> list[str]:
    """What ingest says about skipped files: unsupported types in one line counted by extension
    (``skipped 210 files: 150 .png, 40 .svg, 20 .css (unsupported type)``); any other reason a line
    per file when few, else one line naming the first few. ``verbose``: a line per file first."""
    from ..ingestion.pipeline import UNSUPPORTED

    lines = [f"skipped {p}: {reason}" for reason, paths in by_reason.items() for p in paths] if verbose else []
    types: dict[str, int] = {}
    for reason, paths in by_reason.items():
        if reason.startswith(UNSUPPORTED + " "):
            ext = reason[len(UNSUPPORTED) + 1:]
            types[ext] = types.get(ext, 0) + len(paths)
    if types:
        ranked = sorted(types.items(), key=lambda t: (-t[1], t[0]))
        named = ", ".join(f"{n} {'no extension' if ext == '(none)' else ext}" for ext, n in ranked[:TYPES_SHOWN])
        if len(ranked) > TYPES_SHOWN:
            named += f", {sum(n for _, n in ranked[TYPES_SHOWN:])} of {len(ranked) - TYPES_SHOWN} other types"
        total = sum(types.values())
        lines.append(f"skipped {total} file{'s' if total != 1 else ''}: {named} (unsupported type"
                     + ("" if verbose else "; -v names them") + ")")
    for reason, paths in by_reason.items():
        if reason.startswith(UNSUPPORTED + " ") or verbose:
            continue
        if len(paths) <= FEW_SKIPPED:
            lines.extend(f"skipped {p}: {reason}" for p in paths)
        else:
            lines.append(f"skipped {len(paths)} files ({reason}): {', '.join(paths[:FEW_SKIPPED])} and "
                         f"{len(paths) - FEW_SKIPPED} more (-v names them)")
    return lines


def mkdocs_line(site: dict) -> str:
    """'mkdocs.yml: site_url https://…/, slugify pymdownx.slugs.slugify(case=lower) (/repo/mkdocs.yml)'."""
    from pathlib import Path

    if site["base_url_from"] in ("--base-url", "data.sources"):
        url = f"base URL {site['base_url']} from {site['base_url_from']}" + (
            f" (its site_url {site['site_url']} not used)" if site["site_url"] and site["site_url"] != site["base_url"] else "")
    else:
        url = f"site_url {site['site_url']}" if site["site_url"] else "no site_url (citations stay path:line; --base-url sets one)"
    parts = [url, f"slugify {site['slugify']}" if site["slugify"] else "no heading ids (explicit ones only)"]
    if site["separator"] != "-":
        parts.append(f"separator {site['separator']!r}")
    if not site["use_directory_urls"]:
        parts.append("pages as .html (use_directory_urls: false)")
    if site["nav_titles"]:
        parts.append(f"{site['nav_titles']} nav titles")
    return f"{Path(site['config']).name}: " + ", ".join(parts) + f" ({site['config']})"


def kept_lines(kept: dict, shown: int = FIRST_FAILURES) -> list[str]:
    """The kept-text guard's warning: one line per document below the threshold (the first ``shown``)."""
    below = kept.get("below") or []
    if not below:
        return []
    lines = [f"warning: {len(below)} document(s) keep less than {kept['threshold']:.0%} of their visible text "
             "(data.min_kept_text):"]
    for d in below[:shown]:
        missing = ", ".join(d["missing"])
        lines.append(f"  {d['doc_id']}: {d['kept']:.1%} kept" + (f"; missing e.g. {missing}" if missing else ""))
    if len(below) > shown:
        lines.append(f"  … and {len(below) - shown} more (`--json` lists every one: kept_text.below)")
    return lines


def _multilingual_hint(kb, parse_only: bool) -> str | None:
    """Once per store: when a noticeable share of its chunks is CJK and no model reads them."""
    if parse_only:
        return None
    share = kb.suggest_multilingual()
    if share is None:
        return None
    return (f"note: {share:.0%} of the chunks are Chinese/Japanese/Korean text, which the store's English model "
            f"reads poorly; add the bundled multilingual model: kbtool index --add-model use-m --store {kb.path}")
