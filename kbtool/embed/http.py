"""An OpenAI-compatible ``/v1/embeddings`` endpoint (text-embeddings-inference, Ollama, vLLM,
OpenAI, ...): ``--model openai:http://host:port/v1#model-name``.

Batches of texts per request, a timeout per request, retries with exponential backoff on
connection errors, timeouts, 429 and 5xx (``Retry-After`` honoured up to 30 s). The API key is
read from ``$KBTOOL_EMBED_API_KEY`` at call time (``$OPENAI_API_KEY`` only for api.openai.com: a
store's manifest must not decide where that key goes) and never written anywhere.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request
from functools import cached_property
from typing import Sequence

import numpy as np

from ..errors import ModelError, UsageError
from .base import HTTP_MAX_TOKENS, EmbeddingSpec, Progress, normalise

RETRY_STATUS = {408, 429, 500, 502, 503, 504}
PASSAGE_TIMEOUT, QUERY_TIMEOUT = 120.0, 15.0  # seconds per request: a question must not hang a shell


def _env_number(name: str, default: float, minimum: float, kind=int):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise UsageError(f"{name}={raw!r}: must be a number >= {minimum}")
    return value


class HttpEmbedder:
    runtime = "http"

    def __init__(self, spec: EmbeddingSpec, *, batch_size: int | None = None, timeout: float | None = None,
                 retries: int | None = None, backoff: float = 0.5):
        if not spec.url:
            raise ModelError(f"{spec.model}: no endpoint URL recorded; give the model as openai:http://HOST:PORT/v1#NAME (CLI: --model)")
        self.spec = spec
        self.model_id = spec.model
        self.name = spec.model.split(":", 1)[1]
        self.endpoint = spec.url.rstrip("/") + "/embeddings"
        self.batch_size = batch_size or _env_number("KBTOOL_EMBED_BATCH", 32, 1)
        timeout = timeout or _env_number("KBTOOL_EMBED_TIMEOUT", 0, 0.1, float) or None
        self.timeouts = {"passage": timeout or PASSAGE_TIMEOUT, "query": timeout or QUERY_TIMEOUT}
        self.retries = retries if retries is not None else _env_number("KBTOOL_EMBED_RETRIES", 3, 0)
        self.backoff = backoff
        from urllib.parse import urlsplit

        self.host = urlsplit(self.endpoint).hostname or ""
        self._dim: int | None = None

    # ---- sizes -------------------------------------------------------------------------
    @cached_property
    def tokenizer(self):
        from . import load_tokenizer

        return load_tokenizer(self.spec)

    @property
    def max_tokens(self) -> int:
        return self.spec.max_tokens or HTTP_MAX_TOKENS

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(self.spec.passage_prefix + text, add_special_tokens=True).ids)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"], "query").shape[1])
        return self._dim

    # ---- vectors -----------------------------------------------------------------------
    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        return self._encode([self.spec.passage_prefix + t for t in texts], "passage", progress)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.spec.query_prefix + t for t in texts], "query")

    def _encode(self, texts: list[str], kind: str, progress: Progress | None = None) -> np.ndarray:
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            parts.append(self._request(batch, kind))
            if progress:
                progress(len(batch))
        if not parts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return normalise(np.vstack(parts))

    def _request(self, texts: list[str], kind: str) -> np.ndarray:
        request = {"input": texts, "model": self.name, "encoding_format": "float"}
        if self.spec.input_type:
            request["input_type"] = kind
        body = json.dumps(request).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get("KBTOOL_EMBED_API_KEY")
        if not key and self.host == "api.openai.com":
            key = os.environ.get("OPENAI_API_KEY")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = post_json(self.endpoint, body, headers, timeout=self.timeouts[kind], retries=self.retries,
                            backoff=self.backoff, server="embedding server", key_hint="$KBTOOL_EMBED_API_KEY",
                            fix="start it, or give the model as the right openai:http://HOST:PORT/v1#NAME (CLI: --model)")
        return self._vectors(payload, len(texts))

    def _vectors(self, payload: bytes, n: int) -> np.ndarray:
        try:
            data = json.loads(payload)["data"]
            rows = sorted(data, key=lambda d: d.get("index", 0))
            vecs = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f"embedding server {self.endpoint} answered with no usable "
                             f"'data[].embedding' list ({exc.__class__.__name__}): is it OpenAI-compatible?") from None
        if vecs.ndim != 2 or len(vecs) != n:
            raise ModelError(f"embedding server {self.endpoint} returned {len(vecs)} vectors for {n} texts")
        if not np.isfinite(vecs).all():
            raise ModelError(f"embedding server {self.endpoint} returned vectors with NaN or infinite values")
        if self._dim is not None and vecs.shape[1] != self._dim:
            raise ModelError(f"embedding server {self.endpoint} returned {vecs.shape[1]}-d vectors, "
                             f"earlier {self._dim}-d: it is serving another model")
        self._dim = int(vecs.shape[1])
        return vecs


def post_json(url: str, body: bytes, headers: dict, *, timeout: float, retries: int, backoff: float,
              server: str, key_hint: str, fix: str) -> bytes:
    """POST ``body`` and return the response bytes. Retries with exponential backoff (``backoff``
    seconds, doubling; ``Retry-After`` honoured up to 30 s) on connection errors, timeouts, 429 and
    5xx; any other HTTP status is a ModelError at once (``key_hint`` added on 401/403). After the
    last try: ModelError naming ``server``, the URL, the last failure and ``fix``. Shared by the
    embedding endpoint and the rerank server (kbtool.query.rerank)."""
    last, wait = "", 0.0
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(max(wait, backoff * 2 ** (attempt - 1)))
        wait = 0.0
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc)
            last = f"HTTP {exc.code}{': ' + detail if detail else ''}"
            if exc.code not in RETRY_STATUS:
                hint = f" (set {key_hint})" if exc.code in (401, 403) else ""
                raise ModelError(f"{server} {url} refused the request: {last}{hint}") from None
            try:
                wait = min(30.0, float(exc.headers.get("Retry-After") or 0))
            except (TypeError, ValueError):
                wait = 0.0
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError,
                http.client.HTTPException, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            last = ("timed out" if isinstance(reason, (socket.timeout, TimeoutError))
                    else f"{type(reason).__name__}: {reason}" if not str(reason) or isinstance(exc, http.client.HTTPException)
                    else str(reason))
    raise ModelError(f"{server} {url} did not answer ({last}) after {retries + 1} tries: {fix}")


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read().decode("utf-8", "replace").strip()
    except Exception:
        return ""
    try:
        err = json.loads(text).get("error", text)
        text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    return " ".join(text.split())[:200]
