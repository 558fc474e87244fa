"""The store's manifest (``manifest.json``): format version, the embedding model's identity, the
chunking, analyzer, BM25 and HNSW settings, and which catalog generation the indexes hold.

Store settings live here and nowhere else (retrieval settings live in the contract). The schema
is ``Manifest``; ``read`` checks the format version and the keys every store has; ``check_model``
and ``check_dim`` refuse vectors made another way.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

import numpy as np

from ..errors import ModelMismatchError, StoreError
from .analyzer import AnalyzerConfig
from .bm25 import DEFAULT_PARAMS, effective_params
from .files import storage_error, write_json
from .vectors import HNSW

FORMAT_VERSION = 1


class Embedding(TypedDict, total=False):
    model: str  # name, path or endpoint model id (the identity)
    backend: str
    url: str | None
    query_prefix: str
    passage_prefix: str
    input_type: bool
    tokenizer: str | None
    normalize: bool
    dim: int | None  # set by the first index
    max_tokens: int | None
    runtime: str  # what embedded last: onnx | torch | http


class Manifest(TypedDict, total=False):
    format_version: int
    kbtool_version: str
    created_at: str
    embedding: Embedding
    chunking: dict | None  # ChunkParams.to_dict() of the last chunking, None before any
    analyzer: dict  # AnalyzerConfig.to_dict()
    bm25: dict  # bm25s method, k1, b
    bm25_built_with: dict  # analyzer + bm25 settings the BM25 index on disk was built with
    hnsw: dict
    indexed_generation: int  # catalog generation both indexes hold (-1: none / being rebuilt)
    last_ingest: str | None
    markup: dict  # Markdown clean-up rules of the last ingest
    # further dense retrievers ``dense:NAME``: NAME -> the Embedding record of its model, plus
    # ``indexed_generation`` (the catalog generation its vectors hold, -1 none)
    models: dict
    said_multilingual: bool  # ingest suggested the multilingual model once
    # ingest root (absolute folder, or beir:FOLDER) -> the options it is ingested with (include,
    # exclude, metadata, meta_from_path, include_root, id_prefix, base_url, ...) and ``paths`` under it
    sources: dict
    # where the vectors are, when not in Chroma embedded (``chroma/``): {"engine": "chroma-server", "url",
    # "tenant", "database", "collection" (the prefix of the store's collections)}; never credentials
    vectors: dict


REQUIRED = ("format_version", "embedding", "analyzer", "bm25", "hnsw")


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def new(spec, version: str, vectors: dict | None = None) -> Manifest:
    """The manifest of a new, empty store whose vectors will be made with ``spec`` (and kept where
    ``vectors`` says: a Chroma server's record; None: Chroma embedded)."""
    return {
        "format_version": FORMAT_VERSION,
        "kbtool_version": version,
        "created_at": now_iso(),
        "embedding": embedding_record(spec),
        "chunking": None,
        "analyzer": AnalyzerConfig().to_dict(),
        "bm25": dict(DEFAULT_PARAMS),
        "hnsw": dict(HNSW),
        "indexed_generation": -1,
        "last_ingest": None,
        **({"vectors": dict(vectors)} if vectors else {}),
    }


def check_folder(path: Path, create: bool) -> bool:
    """Whether folder ``path`` holds a store; StoreError if it cannot be (a file, a dangling symlink, a
    manifest without a catalog), or if there is none and ``create`` is false."""
    if path.is_symlink() and not path.exists():
        raise StoreError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: create "
                         "that folder, or choose another store path")
    if path.exists() and not path.is_dir():
        raise StoreError(f"{path} is a file, not a kbtool store: choose another store path")
    if (path / "manifest.json").exists() and not (path / "catalog.sqlite3").exists():
        # Never recreate an empty catalog under existing indexes: the next index would wipe them.
        raise StoreError(f"{path} has a manifest but no catalog.sqlite3: the store is damaged "
                         "(its documents cannot be recovered from the indexes); re-ingest into a new store")
    if (path / "manifest.json").exists():
        return True
    if not create:
        raise StoreError(f"no kbtool store at {path}: run `kbtool ingest <folder>` first, or pass --store")
    return False


def create(path: Path, model, version: str, vectors: dict | None = None) -> None:
    """Write the manifest of a new store in ``path`` (missing or empty); the model, and a server that
    is to hold the vectors (``vectors``: a record of ``chroma_server.server_record``), are checked first."""
    from ..embed import check_available

    if path.exists() and any(path.iterdir()):
        raise StoreError(f"{path} exists and is not a kbtool store: choose another store path")
    spec = spec_of(model)
    check_available(spec)  # fail before anything is written
    if vectors:
        from .chroma_server import check_new

        check_new(vectors)
    try:
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / "manifest.json", new(spec, version, vectors))
    except OSError as exc:
        where = next((p for p in [path, *path.parents] if p.exists()), path)
        raise (storage_error(exc, where, "creating a store") or exc) from None


def default_model_name(spec) -> str:
    """The retriever name a model gets when added without one: its short id (``use-m``), or the
    last part of its name or folder."""
    return spec.model.rstrip("/").rsplit("/", 1)[-1].split("#")[-1]


def model_slug(name: str) -> str:
    """A retriever name for ``dense:NAME``: lowercase letters, digits, '.', '_', '-' (at most 40)."""
    import re

    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")[:40].strip("-._")
    if not slug:
        raise StoreError(f"{name!r} gives no model name: pass one made of letters and digits")
    return slug


def embedding_record(spec) -> Embedding:
    """What a fresh (or rebuilt) store records of its model, before any vector gives the width."""
    return {**spec.to_manifest(), "dim": None, "max_tokens": spec.max_tokens}


def read(path: Path) -> Manifest:
    """The manifest in store folder ``path``; StoreError if unreadable, incomplete or of another format."""
    file = path / "manifest.json"
    try:
        manifest = json.loads(file.read_text())
    except PermissionError:
        raise StoreError(f"permission denied reading {file}: ask the store's owner for read permission "
                         "(`chmod -R a+rX` on the store folder)") from None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{file} is unreadable ({exc}): the store is damaged") from None
    if not isinstance(manifest, dict):
        raise StoreError(f"{file} is not a JSON object: the store is damaged")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        if not isinstance(version, int) or isinstance(version, bool):
            raise StoreError(f"{file}: format_version is {json.dumps(version)}, not the integer {FORMAT_VERSION}: "
                             "the manifest was edited or damaged; write it as a number, or re-ingest into a new store")
        raise StoreError(
            f"store {path} has format {version}, this kbtool reads format {FORMAT_VERSION}: "
            + ("upgrade kbtool" if newer else "re-ingest into a new store"))
    missing = [k for k in REQUIRED if not isinstance(manifest.get(k), dict) and k != "format_version"]
    if "embedding" not in missing and not isinstance(manifest["embedding"].get("model"), str):
        missing.append("embedding.model")
    if not isinstance(manifest.get("chunking"), (dict, type(None))):
        missing.append("chunking (an object)")
    if missing:
        raise StoreError(f"{file} lacks {', '.join(missing)}: the store is damaged; re-ingest into a new store")
    return manifest


def bm25_spec(manifest: Manifest) -> dict:
    """The settings a BM25 index is built with: analyzer and bm25s parameters (a store whose manifest
    says ``robertson`` is built with Lucene's IDF, so its BM25 is behind until the next index)."""
    return {"analyzer": AnalyzerConfig.from_dict(manifest["analyzer"]).to_dict(),
            "bm25": effective_params(manifest["bm25"])}


def stamp(path: Path) -> tuple:
    """What changes whenever the manifest in store folder ``path`` is rewritten (atomic writes
    replace the file)."""
    st = (path / "manifest.json").stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


def bm25_built_with(manifest: Manifest) -> dict:
    """The settings the BM25 index on disk was built with: its record, or for a store from before the
    record, what its manifest said (a ``robertson`` there was built with Robertson's IDF)."""
    if "bm25_built_with" in manifest:
        return manifest["bm25_built_with"]
    return {"analyzer": AnalyzerConfig.from_dict(manifest["analyzer"]).to_dict(),
            "bm25": {**DEFAULT_PARAMS, **manifest["bm25"]}}


def bm25_digest(wanted: dict[str, str], spec: dict) -> str:
    """Digest of a chunk set (chunk id -> index hash) and the BM25 settings: what a BM25 index on
    disk records it holds."""
    import hashlib

    h = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
    for cid in sorted(wanted):
        h.update(f"{cid}\0{wanted[cid]}\n".encode())
    return h.hexdigest()


def spec_of(model):
    """An ``EmbeddingSpec`` from a name, path, ``openai:URL#name`` or a spec."""
    from ..embed import EmbeddingSpec, parse_model

    return model if isinstance(model, EmbeddingSpec) else parse_model(model)


def check_model(manifest: Manifest, model, where: Path) -> None:
    """Refuse vectors made another way: a different model (name, path or spec), or, for a spec,
    different query/passage prefixes. An endpoint's URL may change freely."""
    if model is None:
        return
    from ..embed import EmbeddingSpec

    mine = EmbeddingSpec.from_manifest(manifest["embedding"])
    if isinstance(model, EmbeddingSpec):
        asked, differs = model, model.identity() != mine.identity()
    else:
        asked = spec_of(model)
        differs = asked.model != mine.model
    if not differs:
        return
    if asked.model != mine.model:
        what = f"embedding model {mine.model!r}, not {asked.model!r}"
    else:
        mi, ai = mine.identity(), asked.identity()
        what = ", ".join(f"{k} {mi[k]!r}, not {ai[k]!r}" for k in mi if mi[k] != ai[k])
    shown = f"--model {model}" if isinstance(model, str) else asked.cli()
    raise ModelMismatchError(
        f"store {where} was built with {what}: query with the store's own model, or rebuild its "
        f"vectors with `kbtool index {shown} --rebuild`")


def check_dim(manifest: Manifest, vectors, where: Path, kind: str = "query",
              fix: str = "`kbtool index --model ... --rebuild`") -> None:
    """Vectors of another width than the store's: the endpoint now serves another model."""
    dim = manifest["embedding"].get("dim")
    got = int(np.asarray(vectors).shape[1]) if len(vectors) else dim
    if dim and got != dim:
        raise ModelMismatchError(
            f"the embedding model returned {got}-d {kind} vectors; store {where} holds {dim}-d vectors "
            f"of {manifest['embedding']['model']!r}: point the model at the server of that model, or rebuild "
            f"with {fix}")
