"""What an ingest checks before it writes: the store it writes to, opened (or made) only once every
request that can be checked is known to be good — a mistyped path, stemmer or id prefix, an
endpoint or Chroma server that is down leave nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from ..errors import UsageError


def check_request(paths: Sequence[Path], *, stemmer: str | None = None, id_prefix: str | None = None) -> None:
    """What can be checked before a store is made: the stemmer's name, the id prefix, the paths."""
    if stemmer is not None:
        from ..store.analyzer import stemmer as stemmer_named

        stemmer_named(None if stemmer == "none" else stemmer)
    if id_prefix is not None:
        from ..document import normalise_id_prefix

        try:
            normalise_id_prefix(id_prefix)
        except ValueError as exc:
            raise UsageError(f"id prefix: {exc}") from None
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"{missing[0]}: no such file or folder" + (f" (and {len(missing) - 1} more)" if missing[1:] else ""))


def open_for_ingest(store: Path | None, paths: Sequence[Path], declared, *, model: str | None = None,
                    query_prefix=None, passage_prefix=None, max_tokens=None, tokenizer=None, input_type=False,
                    stemmer: str | None = None, id_prefix: str | None = None, vectors: dict | None = None,
                    models: Sequence[tuple[str | None, str]] = (), parse_only: bool = False,
                    configure: Callable | None = None):
    """(store, embedder) an ingest of ``paths`` (or of ``declared``, the contract's sources) writes
    with: the store at ``store`` (made if none is there, with ``model`` and ``vectors``), its stemmer
    set, further ``models`` [(name, model)] added, and the embedder of the model asked for (None: the
    store's). ``configure(store)`` runs first on the opened store (how its writer waits)."""
    from ..embed import load_embedder
    from ..store import Store, default_store_path
    from ..store.models import check_sizing, model_spec

    check_request(paths, stemmer=stemmer, id_prefix=id_prefix)
    options = (query_prefix, passage_prefix, max_tokens, tokenizer, input_type)
    new_store = not ((store or default_store_path()) / "manifest.json").exists()
    if new_store and not paths and not declared:
        raise UsageError("nothing to ingest: name a folder (kbtool ingest PATH), or declare data.sources in the "
                         "contract (kbtool.yaml)")
    spec = model_spec(None, model, *options) if model or new_store else None
    if spec is not None and spec.backend == "http" and not parse_only:
        load_embedder(spec).dim  # a server that is down fails here, before anything is parsed or written
    kb = Store.open(store, create=True, model=spec, vectors=vectors)
    if configure is not None:
        configure(kb)
    if not new_store:  # the store's model, changed by these options (or the same one, given again)
        spec = model_spec(kb, model, *options)
        if kb.manifest.get("vectors") and not parse_only:
            kb.vectors.count()  # a Chroma server that is down fails here, before anything is parsed
    kb.check_model(spec)
    check_sizing(kb, spec)
    if stemmer is not None:
        kb.set_stemmer(stemmer)
    for name, added in models:
        kb.add_model(added, name)
    return kb, (load_embedder(spec) if spec is not None else None)
