"""Reranking: re-order the top of the fused list with a second scorer (``postprocess.rerank``).

``apply`` is the one entry point; ``pipeline.answer`` calls it right after fusion, so ``query``,
``eval`` and ``calibrate`` all see the same reranked order. It scores the top ``top_n`` fused
candidates — the text the index embeds for each (section prefix + chunk text,
``kbtool.document.embed_text``) against the question — and orders them by

    final = weight * minmax(rerank score) + (1 - weight) * minmax(fused score)

(min-max over those ``top_n``; ties keep the fused order). The rest of the fused list follows
unchanged below them. Scores the caller sees: ``final`` (0..1) for the reranked head; below it
every other candidate keeps its fused order with ``minmax(fused) - 1`` on the head's fused range
(below 0), so scores fall monotonically down the list (TREC runs, ``Hit.score``).

Backends (one small protocol, ``score(question, texts) -> list[float]``, loaded once per process):

* ``cross-encoder``: a local sentence-transformers ``CrossEncoder`` folder, offline, torch
  imported on first use. Scores are what the model's activation gives (sentence-transformers
  applies a sigmoid to a one-label model, so 0..1); a batch with a score outside 0..1 (a model
  saved with an identity activation: logits) is mapped through a sigmoid, which keeps its order.
* ``http``: a rerank server, TEI (``POST URL/rerank``) or Cohere/Jina (``POST URL/v1/rerank``)
  request shapes; timeouts, retries and errors as the embedding endpoint
  (``kbtool.embed.http.post_json``); a bearer key from ``$api_key_env`` when it is set.
* ``dense``: the cosine between the question and each candidate under a dense retriever of the
  store (``dense`` or ``dense:NAME``), from the store's cached chunk vectors.

``cache`` maps (backend identity, question, chunk id) -> rerank score; the pipeline passes one
kept on the ``Candidates``, so ``calibrate`` — the same candidates under many fusion settings —
scores each pair once.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Protocol, Sequence

from ..errors import ContractError, ModelError

Fused = list[tuple[str, float]]


class Reranker(Protocol):
    def score(self, question: str, texts: Sequence[str], ids: Sequence[str] | None = None) -> list[float]:
        """One relevance score per text, higher is better (``ids``: the texts' chunk ids, which a
        backend may use to find what it already has for them)."""


# ---- the stage ------------------------------------------------------------------------------
def apply(store, settings, question: str, fused: Fused, rows_of: Callable[[list[str]], dict[str, dict]],
          cache: dict) -> tuple[Fused, dict]:
    """The fused list with its top ``settings.top_n`` reordered by the reranker, and what was done:
    ``{"backend", "model", "top_n", "weight", "ms", "scored", "cached", "scores": {chunk_id: score}}``
    (``scored``: pairs sent to the backend; ``cached``: pairs found in ``cache``)."""
    from ..document import embed_text

    t0 = time.perf_counter()
    head = fused[: settings.top_n]
    rows = rows_of([c for c, _ in head])
    ghosts = [item for item in head if item[0] not in rows]  # not in the catalog: dropped later anyway
    head = [item for item in head if item[0] in rows]
    key = identity(settings)
    todo = [c for c, _ in head if (key, question, c) not in cache]
    if todo:
        backend = load(store, settings)
        texts = [embed_text(rows[c].get("prefix") or "", rows[c]["text"]) for c in todo]
        got = backend.score(question, texts, todo)
        if len(got) != len(todo) or not all(isinstance(s, (int, float)) and math.isfinite(s) for s in got):
            raise ModelError(f"reranker {key} gave {len(got)} scores for {len(todo)} texts, or a score that is "
                             "not a finite number (postprocess.rerank)")
        for c, s in zip(todo, got):
            cache[(key, question, c)] = float(s)
    scores = {c: cache[(key, question, c)] for c, _ in head}
    out = _combine(head, scores, settings.weight) + _below(head, ghosts + fused[settings.top_n:])
    info = {"backend": settings.backend, "model": key, "top_n": settings.top_n, "weight": settings.weight,
            "ms": round((time.perf_counter() - t0) * 1000, 2), "scored": len(todo),
            "cached": len(head) - len(todo), "scores": {c: round(s, 6) for c, s in scores.items()}}
    return out, info


def _minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [1.0] * len(values) if hi - lo <= 0 else [(v - lo) / (hi - lo) for v in values]


def _combine(head: Fused, scores: dict[str, float], weight: float) -> Fused:
    if not head:
        return []
    r = _minmax([scores[c] for c, _ in head])
    f = _minmax([s for _, s in head])
    final = [weight * a + (1 - weight) * b for a, b in zip(r, f)]
    order = sorted(range(len(head)), key=lambda i: (-final[i], i))
    return [(head[i][0], final[i]) for i in order]


def _below(head: Fused, rest: Fused) -> Fused:
    """The rest in fused order, with scores below 0: min-max on the head's fused range, minus 1."""
    if not rest:
        return []
    lo = min((s for _, s in head), default=max(s for _, s in rest))
    hi = max((s for _, s in head), default=lo)
    span = (hi - lo) or 1.0
    return [(c, min(0.0, (s - lo) / span) - 1.0) for c, s in rest]


# ---- backends, by name (postprocess.rerank.backend) --------------------------------------------
@dataclass(frozen=True)
class Backend:
    load: Callable[[Any, Any], Reranker]  # (store, settings) -> the reranker; heavy ones once per process
    identity: Callable[[Any], str]  # settings -> what it is: the cache key's first part, the trace's ``model``


BACKENDS: dict[str, Backend] = {}


def register(name: str, load: Callable[[Any, Any], Reranker], identity: Callable[[Any], str]) -> None:
    """Make ``postprocess.rerank.backend: NAME`` rerank with ``load(store, settings)``."""
    BACKENDS[name] = Backend(load, identity)


def _backend(settings) -> Backend:
    got = BACKENDS.get(settings.backend)
    if got is None:
        raise ContractError(f"postprocess.rerank.backend: {settings.backend!r} has no reranker")
    return got


def identity(settings) -> str:
    """What the backend is (the cache key's first part and the trace's ``model``)."""
    return _backend(settings).identity(settings)


def load(store, settings) -> Reranker:
    """The backend the settings name; the heavy ones are loaded once per process."""
    return _backend(settings).load(store, settings)


@lru_cache(maxsize=2)
def _cross_encoder(model: str) -> "CrossEncoderReranker":
    return CrossEncoderReranker(model)


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder from a local folder (nothing is downloaded)."""

    batch_size = 32

    def __init__(self, folder: str):
        from pathlib import Path

        path = Path(folder).expanduser()
        if not (path / "config.json").is_file():
            raise ModelError(f"postprocess.rerank.model: {folder} is not a local model folder (no config.json): "
                             "give the folder of a sentence-transformers CrossEncoder (models are not downloaded)")
        from .._env import setup_offline_env

        setup_offline_env()
        try:
            from sentence_transformers import CrossEncoder

            self.model = CrossEncoder(str(path), device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 (torch, transformers, safetensors: each its own types)
            raise ModelError(f"postprocess.rerank.model: cannot load the cross-encoder in {folder} "
                             f"({' '.join(str(exc).split())[:200]})") from None
        self._lock = threading.Lock()  # one model, possibly many query threads

    def score(self, question: str, texts: Sequence[str], ids: Sequence[str] | None = None) -> list[float]:
        if not texts:
            return []
        with self._lock:
            raw = self.model.predict([(question, t) for t in texts], batch_size=self.batch_size,
                                     show_progress_bar=False, convert_to_numpy=True)
        values = [float(v) for v in raw.reshape(len(texts), -1)[:, 0]]
        if any(v < 0.0 or v > 1.0 for v in values):  # logits: map to 0..1, same order
            values = [1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, v)))) for v in values]
        return values


class DenseReranker:
    """Cosine of the question and each text under a dense retriever of the store (``dense`` or
    ``dense:NAME``): chunk vectors from the store's cache, a text without one embedded now."""

    def __init__(self, store, name: str):
        from ..embed import load_embedder
        from ..errors import StoreError

        self.store, self.name = store, name
        try:
            self.embedder = load_embedder(store.embedding_spec(name))
        except StoreError as exc:
            raise ContractError(f"postprocess.rerank.model: {exc}") from None

    def score(self, question: str, texts: Sequence[str], ids: Sequence[str] | None = None) -> list[float]:
        import numpy as np

        if not texts:
            return []
        ids = list(ids) if ids is not None else [""] * len(texts)
        q = np.asarray(self.embedder.embed_queries([question]), dtype=np.float32)[0]
        cached = self.store.chunk_vectors([c for c in ids if c], name=self.name) if any(ids) else {}
        missing = [i for i, c in enumerate(ids) if c not in cached]
        fresh = self.embedder.embed([texts[i] for i in missing]) if missing else []
        vecs = [cached.get(c) for c in ids]
        for i, v in zip(missing, fresh):
            vecs[i] = v
        m = np.asarray(vecs, dtype=np.float32).reshape(len(ids), -1)
        norms = np.linalg.norm(m, axis=1) * (np.linalg.norm(q) or 1.0)
        return [float(x) for x in (m @ q) / np.where(norms > 0, norms, 1.0)]


def endpoint(settings) -> str:
    url = (settings.url or "").rstrip("/")
    if url.endswith("/rerank"):
        return url
    return url + ("/rerank" if settings.api == "tei" else "/v1/rerank")


class HttpReranker:
    """A rerank server: TEI ``{"query", "texts", "raw_scores": false}`` -> ``[{"index", "score"}]``,
    or Cohere/Jina ``{"model", "query", "documents", "top_n"}`` -> ``{"results": [{"index",
    "relevance_score"}]}``."""

    backoff = 0.25  # seconds before the first retry, doubling

    def __init__(self, url: str, api: str, model: str | None, key_env: str, timeout: float, retries: int):
        self.url, self.api, self.model, self.key_env = url, api, model, key_env
        self.timeout, self.retries = timeout, retries

    def score(self, question: str, texts: Sequence[str], ids: Sequence[str] | None = None) -> list[float]:
        from ..embed.http import post_json

        if not texts:
            return []
        if self.api == "tei":
            request: dict = {"query": question, "texts": list(texts), "raw_scores": False}
            if self.model:
                request["model"] = self.model
        else:
            request = {"query": question, "documents": list(texts), "top_n": len(texts)}
            if self.model:
                request["model"] = self.model
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = post_json(self.url, json.dumps(request).encode(), headers, timeout=self.timeout,
                            retries=self.retries, backoff=self.backoff, server="rerank server",
                            key_hint=f"${self.key_env}, postprocess.rerank.api_key_env",
                            fix="start it, or correct postprocess.rerank.url")
        return self._scores(payload, len(texts))

    def _scores(self, payload: bytes, n: int) -> list[float]:
        shape = "[{index, score}]" if self.api == "tei" else "{results: [{index, relevance_score}]}"
        bad = (f"rerank server {self.url} did not answer with {shape}: is postprocess.rerank.api "
               f"({self.api}) the server's API?")
        try:
            data = json.loads(payload)
            items = data if self.api == "tei" else data["results"]
            field = "score" if self.api == "tei" else "relevance_score"
            pairs = [(int(item["index"]), float(item[field])) for item in items]
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            raise ModelError(bad) from None
        out: list[float | None] = [None] * n
        for index, value in pairs:
            if not 0 <= index < n:
                raise ModelError(f"rerank server {self.url} returned index {index} for {n} texts")
            if not math.isfinite(value):
                raise ModelError(f"rerank server {self.url} returned a score that is not a finite number")
            out[index] = value
        if any(v is None for v in out):
            raise ModelError(f"rerank server {self.url} scored {sum(v is not None for v in out)} of {n} texts: "
                             "a server that caps its batch (TEI --max-client-batch-size) needs a "
                             "postprocess.rerank.top_n within it")
        return out  # type: ignore[return-value]


register("cross-encoder", lambda store, s: _cross_encoder(s.model), lambda s: f"cross-encoder:{s.model}")
register("http", lambda store, s: HttpReranker(endpoint(s), s.api, s.model, s.api_key_env, s.timeout_s, s.retries),
         lambda s: f"http:{s.api}:{endpoint(s)}#{s.model or ''}")
register("dense", lambda store, s: DenseReranker(store, s.dense_retriever), lambda s: s.dense_retriever)
