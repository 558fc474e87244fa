from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import app
from ._common import JsonOpt, QuietOpt, StoreOpt, WaitOpt, writer_settings, handle_errors, open_store, out, print_json, progress_bars


@app.command()
@handle_errors
def chunk(
    size: Annotated[int, typer.Option("--size", metavar="N", help="Max tokens per chunk, prefix included (0 = the embedding model's limit).")] = 0,
    overlap: Annotated[Optional[int], typer.Option("--overlap", metavar="N", help="Tokens of overlap when a long passage is split [default: min(32, size/4)].")] = None,
    hard_max: Annotated[int, typer.Option("--hard-max", metavar="N", help="Tables and code blocks up to this many tokens stay whole (0 = 2 x size).")] = 0,
    prefix: Annotated[bool, typer.Option("--prefix/--no-prefix", help="Prefix title and section path to the indexed text.")] = True,
    all_: Annotated[bool, typer.Option("--all", help="Re-chunk every document even if its parameters are unchanged.")] = False,
    wait: WaitOpt = 300.0,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
):
    """Re-chunk stored documents (no re-parsing). Run `kbtool index` afterwards."""
    from ..chunk import ChunkParams
    from ..chunk import chunk as run_chunk

    kb = open_store(store)
    writer_settings(kb, wait, quiet)
    with progress_bars(quiet) as progress:
        n = run_chunk(kb, ChunkParams(size, overlap, hard_max, prefix), all_documents=all_, progress=progress)
    result = {"chunks_written": n, "chunking": kb.manifest["chunking"], "indexes_current": kb.is_indexed()}
    if json_:
        print_json(result)
    else:
        out.print(f"{n} chunks written with {kb.manifest['chunking']}", highlight=False)
        if not kb.is_indexed():
            out.print("indexes are behind the catalog: run `kbtool index`")
