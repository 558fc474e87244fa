"""The store's embedding models: the primary one (``dense``) and those added as ``dense:NAME``,
their manifest records, vector indexes and checks (``Store`` reads them through ``ModelsView``)."""

from __future__ import annotations

from . import manifest as mf
from ..errors import StoreError
from .engines import describe_vectors, engine_of, open_vectors
from .vectors import VectorIndex


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
                                                     lambda: self.embedding_spec(name).cache_key, retriever=name)
        return self._extra_vectors[name]

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
