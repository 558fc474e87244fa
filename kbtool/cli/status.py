from __future__ import annotations

from . import app
from ._common import JsonOpt, StoreOpt, handle_errors, open_store, out, print_json


@app.command()
@handle_errors
def status(store: StoreOpt = None, json_: JsonOpt = False):
    """What the store holds: documents, chunks, model, sizes, last ingest."""
    info = open_store(store).status()
    if json_:
        print_json(info)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    emb = info["embedding"]
    rows = [
        ("store", f"{info['store']} (format {info['format_version']}, kbtool {info['kbtool_version']})"),
        ("documents", f"{info['documents']}  " + ", ".join(f"{k}: {v}" for k, v in info["documents_by_type"].items())),
        ("chunks", f"{info['chunks']}  (avg {info['chunk_tokens_avg']} tokens, max {info['chunk_tokens_max']}, "
                   f"{info['chunks_over_model_limit']} over the model limit)"),
        ("model", f"{emb['model']}  ({emb['dim'] or '?'}-d, {emb['max_tokens'] or '?'} tokens"
                  + (f", {emb['url']}" if emb.get("url") else "")
                  + (f", prefixes {emb.get('query_prefix')!r}/{emb.get('passage_prefix')!r}"
                     if emb.get("query_prefix") or emb.get("passage_prefix") else "")
                  + (", input_type sent" if emb.get("input_type") else "")
                  + (f", embedded by {emb['runtime']}" if emb.get("runtime") else "") + ")"),
        ("chunking", str(info["chunking"])),
        ("bm25", str(info["bm25"])),
        ("analyzer", str(info["analyzer"])),
        ("indexes", "current" if info["indexes_current"] else "behind the catalog: run `kbtool index`"),
        ("last ingest", str(info["last_ingest"])),
        ("disk", f"{info['disk_bytes'] / 2**20:.1f} MiB"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    out.print(table, highlight=False)
