"""The store's embedding models: the primary one (``dense``) and those added as ``dense:NAME``,
their manifest records, vector indexes and checks (``Store`` reads them through ``ModelsView``), and
the policy every caller of ``Store`` meets: which model a request means (``model_spec``), what may be
added (``check_new_model``), sizing that changes only with a rebuild, where the vectors are."""

from __future__ import annotations

import re

from ..errors import StoreError, UsageError
from . import manifest as mf
from .engines import describe_vectors, engine_of, open_vectors
from .vectors import CatalogVectors, ChromaVectors, VectorIndex

# Chunks up to which a search scans the catalog's vectors (exact) instead of asking Chroma's HNSW.
SCAN_MAX = 10_000


class ModelsView:
    """The model side of ``Store``: records, specs, checks and vector indexes (nothing written)."""

    @property
    def model_id(self) -> str:
        return self.manifest["embedding"]["model"]

    def embedding_spec(self, name: str = "dense"):
        """The ``EmbeddingSpec`` the vectors of dense retriever ``name`` were (or will be) made with:
        ``dense`` (the store's model) or ``dense:NAME`` (a model added by ``index --add-model``)."""
        from ..embed import EmbeddingSpec

        return EmbeddingSpec.from_manifest(self.model_record(name))

    def model_record(self, name: str = "dense") -> dict:
        """The manifest record of dense retriever ``name``; StoreError if the store has no such model."""
        if name == "dense":
            return self.manifest["embedding"]
        rec = self.manifest.get("models", {}).get(name.removeprefix("dense:"))
        if rec is None or not name.startswith("dense:"):
            have = ", ".join(self.dense_retrievers())
            raise StoreError(f"store {self.path} has no embedding model {name!r} (it has: {have}): add one with "
                             f"`kbtool index --add-model MODEL`")
        return rec

    def dense_retrievers(self) -> list[str]:
        """The names of the store's dense retrievers: ``dense``, then ``dense:NAME`` per added model."""
        return ["dense"] + [f"dense:{n}" for n in sorted(self.manifest.get("models", {}))]

    def check_model(self, model, name: str = "dense") -> None:
        mf.check_model({"embedding": self.model_record(name)}, model, self.path)

    def check_dim(self, vectors, where: str = "query", name: str = "dense") -> None:
        mf.check_dim({"embedding": self.model_record(name)}, vectors, self.path, where,
                     *(() if name == "dense" else ("`kbtool index --rebuild` (re-embeds every model)",)))

    # ---- further embedding models (dense:NAME) -------------------------------------------
    def vectors_for(self, name: str = "dense") -> VectorIndex:
        """The vector index of dense retriever ``name`` (its own Chroma collection)."""
        if name == "dense":
            return self.vectors
        self.model_record(name)  # StoreError for a model the store does not have
        if name not in self._extra_vectors:
            self._extra_vectors[name] = open_vectors(self.path, self.manifest, self.catalog,
                                                     lambda: self.embedding_spec(name).cache_key, retriever=name,
                                                     client=self._chroma_client)
        return self._extra_vectors[name]

    def search_engine(self, name: str = "dense") -> VectorIndex:
        """The engine a search of dense retriever ``name`` reads: for a store of Chroma embedded with
        at most ``SCAN_MAX`` chunks, an exact scan of the vectors the catalog's embedding cache holds
        for its chunks (``CatalogVectors``: the very vectors ``index`` wrote to Chroma), so a query
        never imports chromadb (~0.4 s of a cold query) nor loads its HNSW; else the index itself."""
        engine = self.vectors_for(name)
        if not isinstance(engine, ChromaVectors) or self._on_server() or self.chunk_total() > SCAN_MAX:
            return engine
        scans = self.__dict__.setdefault("_scans", {})
        if name not in scans:
            scans[name] = CatalogVectors(self.path / "chroma", self.catalog, lambda: self.embedding_spec(name).cache_key,
                                         lambda: StoreError(f"{self.path}: a search engine writes nothing"))
        # A chunk whose vector the catalog lacks (a writer at work, an embedding cache emptied by hand):
        # the index answers, whatever it holds.
        return scans[name] if scans[name].count() >= self.chunk_total() else engine

    def _on_server(self) -> bool:
        return engine_of(self.manifest) != "chroma"

    def _vectors_made(self) -> bool:
        """Whether the vector engine may hold collections: a server, or ``chroma/`` on disk."""
        return self._on_server() or (self.path / "chroma").is_dir()

    def vectors_info(self) -> dict:
        """Where the vectors are: engine, path or URL, tenant, database, each retriever's collection
        (never credentials)."""
        return describe_vectors(self.path, self.manifest, self.dense_retrievers())

    def token_limit(self) -> int:
        """The store's model's token limit (256 until the first index records it): chunks longer are
        cut by the model."""
        return self.manifest["embedding"].get("max_tokens") or 256

    def cjk_share(self) -> float | None:
        """The share of chunks holding CJK text when the store has no model that reads it (an added
        model, or a primary model other than the bundled English one) and has not said so yet; else None."""
        from ..embed import DEFAULT_MODEL
        from .analyzer import CJK

        m = self.manifest
        if m.get("models") or m["embedding"]["model"] != DEFAULT_MODEL or m.get("said_multilingual"):
            return None
        texts = [t for _, t in self.catalog.chunk_texts()]
        return sum(1 for t in texts if CJK.search(t)) / len(texts) if texts else 0.0


MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")


def check_new_model(store, model, name: str | None):
    """(spec, retriever name) of a model to add as ``dense:NAME``. A given name must be 1-40 lowercase
    letters, digits, '.', '_', '-'. A model not in the store yet must embed a text first: one that
    cannot (an endpoint down, a folder holding no model) is never recorded, which would leave the
    store behind and every query refused."""
    from ..embed import check_available, load_embedder

    if name is not None and not MODEL_NAME.fullmatch(name):
        raise UsageError(f"model name {name!r}: must be 1-40 lowercase letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit (retriever dense:NAME)")
    spec = mf.spec_of(model)
    name = mf.model_slug(name or mf.default_model_name(spec))
    check_available(spec)  # fail before anything is written
    known = [rec["model"] for rec in (store.manifest.get("models") or {}).values()]
    if spec.model not in known and spec.model != store.model_id:
        load_embedder(spec).embed(["kbtool"])  # ModelError now, before anything is written
    return spec, name


def check_addition(store, spec, name: str) -> bool:
    """Under the writer lock: True if ``dense:NAME`` already is this model; StoreError if the model is
    the store's own, is there under another name, or the name holds another model."""
    models = store.manifest.get("models") or {}
    if spec.model == store.model_id:
        raise StoreError(f"{spec.model} is already the store's model (retriever dense): nothing to add")
    for other, rec in models.items():
        if rec["model"] == spec.model and other != name:
            raise StoreError(f"{spec.model} is already in store {store.path} as dense:{other}")
    if name in models and models[name]["model"] != spec.model:
        raise StoreError(f"dense:{name} is {models[name]['model']}, not {spec.model}: drop it first "
                         f"(`kbtool index --drop-model {name}`) or choose another name")
    return name in models


def model_spec(kb, model, query_prefix=None, passage_prefix=None, max_tokens=None, tokenizer=None, input_type=None):
    """The embedding spec the user asked for, or None for the store's own."""
    from ..embed import parse_model
    from ..embed.base import with_overrides

    input_type = input_type or None  # a flag: absent means "as the store says" (or off for a new model)
    if model is None and (query_prefix, passage_prefix, max_tokens, tokenizer, input_type) == (None,) * 5:
        return None
    if model is None and kb is not None:
        base = kb.embedding_spec()
        extra = parse_model(base.model_arg, max_tokens=max_tokens, tokenizer=tokenizer)
        if input_type and not base.input_type:  # the server adds the prefixes from now on
            query_prefix = "" if query_prefix is None else query_prefix
            passage_prefix = "" if passage_prefix is None else passage_prefix
        return with_overrides(base, query_prefix=query_prefix, passage_prefix=passage_prefix,
                              max_tokens=extra.max_tokens, tokenizer=extra.tokenizer, input_type=input_type)
    spec = parse_model(model, query_prefix=query_prefix, passage_prefix=passage_prefix, max_tokens=max_tokens,
                       tokenizer=tokenizer, input_type=bool(input_type))
    if kb is not None and spec.backend == "http" and spec.model == kb.embedding_spec().model:
        base = kb.embedding_spec()  # the same model: sizing stays the store's unless given
        spec = with_overrides(spec, max_tokens=base.max_tokens if max_tokens is None else None,
                              tokenizer=base.tokenizer if tokenizer is None else None)
    return spec


def check_sizing(kb, spec, rebuild: bool = False) -> None:
    """An endpoint's max_tokens and tokenizer size the chunks: set when a store is made, changed only
    with a rebuild (``rebuild``; then `kbtool chunk --all` re-sizes the chunks)."""
    if spec is None or rebuild or spec.backend != "http":
        return
    mine = kb.embedding_spec()
    if mine.model != spec.model:
        return  # check_model says what is wrong
    if (spec.max_tokens or mine.max_tokens) != mine.max_tokens or (spec.tokenizer or mine.tokenizer) != mine.tokenizer:
        raise UsageError(f"store {kb.path} sizes chunks with max_tokens {mine.max_tokens} and tokenizer "
                         f"{mine.tokenizer or 'estimate'}: change them with `kbtool index ... --rebuild`, then "
                         "`kbtool chunk --all` to re-size the chunks")


def check_vectors(kb, asked: dict | None) -> None:
    """``asked`` (``{"url", "tenant", "database", "collection"}``: where the caller thinks the vectors
    are) must match what the store records: its server is chosen when it is created. The message names
    the CLI's options (--chroma-url, ...), the way these are asked for."""
    if not asked:
        return
    from .chroma_server import parse_url

    rec = kb.manifest.get("vectors")
    if not rec:
        raise UsageError(f"--chroma-url {asked['url']}: store {kb.path} keeps its vectors in Chroma embedded "
                         f"({kb.path / 'chroma'}); a store's vector engine is chosen when it is created: drop "
                         "--chroma-url, or create a new store with it")
    wanted = {"url": parse_url(asked["url"])[0], **{k: v for k, v in asked.items() if k != "url"}}
    for key, value in wanted.items():
        if value != rec.get(key):
            raise UsageError(f"--chroma-{key} {asked[key]}: store {kb.path} keeps its vectors on the Chroma server "
                             f"{rec['url']} (tenant {rec['tenant']}, database {rec['database']}, collection prefix "
                             f"{rec['collection']}), recorded when it was created: drop --chroma-{key}, or give the "
                             "recorded value")
