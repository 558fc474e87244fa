"""The BM25 index: bm25s arrays on disk plus the chunk id of each row."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ..errors import StoreError
from .files import write_json

# The BM25 settings of a new store (its manifest's ``bm25``). Lucene's IDF,
# log(1 + (N - df + 0.5) / (df + 0.5)), is positive for every term: Robertson's
# log((N - df + 0.5) / (df + 0.5)) is 0 (bm25s clamps it) or negative for a term in more than half
# the chunks, and for every term of a one-chunk store, so such terms matched nothing.
DEFAULT_PARAMS = {"method": "lucene", "k1": 1.2, "b": 0.75}
# IDF variants that give a term in most (or all) chunks no weight, and what replaces them.
_NONNEGATIVE = {"robertson": "lucene", "atire": "lucene"}


def effective_params(params: dict) -> dict:
    """The settings an index is built with: ``params`` (a manifest's ``bm25``) with an IDF that never
    goes to zero or below. A store whose manifest says ``robertson`` (the default before) gets
    Lucene's IDF, so its BM25 changes when it is next rebuilt."""
    out = {**DEFAULT_PARAMS, **params}
    out["method"] = _NONNEGATIVE.get(out["method"], out["method"])
    return out


def idf(method: str, df: int, n: int) -> float:
    """The IDF bm25s gives a term held by ``df`` of ``n`` chunks, by bm25s's own scorer for the
    method (``robertson`` clamped at 0; an index built before ``effective_params`` may hold it)."""
    return float(_bm25s().scoring._select_idf_scorer(method)(df, N=max(n, df, 1)))


FAST_METHODS = ("lucene",)  # built from raw postings by ``_index_from_raw`` (bit for bit bm25s's numbers)
RAW_FILE = "raw_postings.npz"  # term frequencies and chunk lengths: BM25 over any subset of the rows


def _raw_postings(vocab: dict[str, int], tokens: list[list[str]]) -> dict[str, np.ndarray]:
    """Term frequency of every (token, row) pair as a CSC matrix (rows ascending per token) and each
    row's length in tokens: what BM25 statistics over a subset of the rows are computed from.
    Vectorised: one pass maps the tokens to ids, a sort counts the (token, row) pairs."""
    from itertools import chain

    n = len(tokens)
    doc_len = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    total = int(doc_len.sum())
    cols = np.fromiter(map(vocab.__getitem__, chain.from_iterable(tokens)), dtype=np.int64, count=total)
    rows = np.repeat(np.arange(n, dtype=np.int64), doc_len)
    return _csc(cols, rows, None, len(vocab), max(n, 1), doc_len)


def _csc(cols: np.ndarray, rows: np.ndarray, tf: np.ndarray | None, n_terms: int, n_rows: int,
         doc_len: np.ndarray) -> dict[str, np.ndarray]:
    """Raw postings from (term, row) pairs: ``tf`` None counts repeated pairs (one per token
    occurrence), else ``tf`` is each (distinct) pair's count."""
    key = cols * n_rows + rows
    if tf is None:
        key = np.sort(key)
        starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else key
        tf = np.diff(np.append(starts, len(key))).astype(np.float32)
        key = key[starts]
    else:
        order = np.argsort(key, kind="stable")
        key, tf = key[order], np.asarray(tf, dtype=np.float32)[order]
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // n_rows, minlength=n_terms), out=indptr[1:])
    return {"indptr": indptr, "rows": (key % n_rows).astype(np.int32), "tf": tf,
            "doc_len": np.asarray(doc_len, dtype=np.int64)}


def _index_from_raw(params: dict, vocab: dict[str, int], raw: dict[str, np.ndarray]):
    """A bm25s retriever whose stored scores are computed from raw postings, vectorised: the same
    float32 numbers bm25s's own (per-document Python) indexing gives — Lucene's IDF per distinct
    document frequency by bm25s's scorer, tf / (k1 x ((1 - b) + b x len / avg) + tf) in float64,
    their product stored as float32 — in a tenth of the time at 100k chunks."""
    bm25s = _bm25s()
    r = bm25s.BM25(k1=params["k1"], b=params["b"], method=params["method"])
    n = len(raw["doc_len"])
    df = np.diff(raw["indptr"])
    score_idf = _select_idf(r.idf_method)
    distinct, which = np.unique(df, return_inverse=True)
    idf_arr = np.array([score_idf(int(d), N=n) if d else 0.0 for d in distinct], dtype=r.dtype)[which]
    avg = raw["doc_len"].mean()
    cols = np.repeat(np.arange(len(df), dtype=np.int64), df)
    tf = raw["tf"].astype(np.float64)
    lengths = raw["doc_len"][raw["rows"]]
    tfc = tf / (r.k1 * ((1 - r.b) + r.b * lengths / avg) + tf)
    data = (idf_arr[cols].astype(np.float64) * tfc).astype(r.dtype)
    r.scores = {"data": data, "indices": raw["rows"].astype(r.int_dtype), "indptr": raw["indptr"].copy(),
                "num_docs": n}
    r.vocab_dict = dict(vocab)
    r.unique_token_ids_set = set(r.vocab_dict.values())
    r.nonoccurrence_array = None
    return r


def _select_idf(method: str):
    return _bm25s().scoring._select_idf_scorer(method)


class Scoped:
    """BM25 statistics over the rows a caller may see (``visible``, a row mask): its chunk count,
    average length and, per token, document frequency and IDF count only those rows, so every
    score equals the score an index built from those rows alone gives (bit for bit: the same
    float32 steps as bm25s). Over a base and a delta segment (``BM25Index.live_postings``), the
    same computation over the live rows of both."""

    _CACHE = 65536  # tokens whose postings are kept (a long-lived server's all-rows statistics)

    def __init__(self, index: "BM25Index", visible: np.ndarray):
        self.index, self.visible = index, visible
        doc_len = index.doc_lengths()
        self.n = int(visible.sum())
        self.avg_len = np.asarray(doc_len[visible]).mean() if self.n else np.float64(1.0)
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows, float32 scores) of this token among the visible rows."""
        hit = self._cache.get(token)
        if hit is not None:
            return hit
        r = self.index.retriever
        rows, tf = self.index.live_postings(token)
        keep = self.visible[rows]
        rows, tf = rows[keep], tf[keep].astype(np.float64)
        if not len(rows):
            out = (rows, np.zeros(0, dtype=np.float32))
        else:
            idf_value = np.float32(idf(r.idf_method, len(rows), self.n))
            k1, b = r.k1, r.b
            lengths = self.index.doc_lengths()[rows]
            # bm25s: tf / (k1 * ((1 - b) + b * len / avg) + tf) in float64, times the float32 idf, stored as float32
            tfc = tf / (k1 * ((1 - b) + b * lengths / self.avg_len) + tf)
            out = (rows, (np.float64(idf_value) * tfc).astype(np.float32))
        if len(self._cache) >= self._CACHE:
            self._cache.clear()
        self._cache[token] = out
        return out


# Segments (issue 20). A change of the catalog's chunk set is written as a *delta segment* beside
# the base index instead of a rebuild: the raw postings of the new and changed chunks only (the
# analyzer runs on those alone), their chunk ids and index hashes, and the base rows that are dead
# (deleted or changed since). Each delta holds everything since the base (it replaces the one
# before), in a fresh folder inside ``bm25/``, switched to by one atomic write of ``state.json``.
# A store with a delta scores from the raw postings of its live rows (as ``Scoped``): the same
# numbers, bit for bit, as a rebuild of the same chunks. A full rebuild (compaction) replaces both
# once the delta passes ``DELTA_FRACTION`` of the base rows, and below ``DELTA_MIN_ROWS`` base rows
# (a rebuild costs well under a second there and keeps queries on bm25s's stored scores).
DELTA_FRACTION = 0.10
DELTA_MIN_ROWS = 2000
ROWS_FILE = "rows.json"  # the base's identity and the index hash of each row (what a delta is made against)
SEGMENT_ARRAYS, SEGMENT_META = "segment.npz", "segment.json"


def _terms_and_postings(tokens: list[list[str]]) -> tuple[list[str], dict[str, np.ndarray]]:
    """A segment's own vocabulary (first-seen order) and raw postings."""
    from itertools import chain

    terms = list(dict.fromkeys(chain.from_iterable(tokens)))
    return terms, _raw_postings({t: i for i, t in enumerate(terms)}, tokens)


def _select_rows(raw: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """Raw postings of the rows ``keep`` marks, renumbered in order (terms kept, maybe empty)."""
    new_row = np.cumsum(keep) - 1
    counts = np.diff(raw["indptr"])
    cols = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    hit = keep[raw["rows"]]
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols[hit], minlength=len(counts)), out=indptr[1:])
    return {"indptr": indptr, "rows": new_row[raw["rows"][hit]].astype(np.int32), "tf": raw["tf"][hit],
            "doc_len": raw["doc_len"][keep]}


def _merge_segments(parts: list[tuple[list[str], dict[str, np.ndarray]]]) -> tuple[list[str], dict[str, np.ndarray]]:
    """One segment of the rows of ``parts`` in turn (terms unified; a term no row holds is dropped)."""
    vocab: dict[str, int] = {}
    cols, rows, tf, lens, offset = [], [], [], [], 0
    for terms, raw in parts:
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), dtype=np.int64, count=len(terms))
        counts = np.diff(raw["indptr"])
        cols.append(np.repeat(ids, counts))
        rows.append(raw["rows"].astype(np.int64) + offset)
        tf.append(raw["tf"])
        lens.append(raw["doc_len"])
        offset += len(raw["doc_len"])
    cols_a = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    used = np.unique(cols_a)
    names = list(vocab)
    remap = np.full(len(vocab) + 1, -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    raw = _csc(remap[cols_a], np.concatenate(rows) if rows else cols_a, np.concatenate(tf) if tf else
               np.zeros(0, dtype=np.float32), len(used), max(offset, 1),
               np.concatenate(lens) if lens else np.zeros(0, dtype=np.int64))
    return [names[i] for i in used], raw


class Delta:
    """A delta segment as loaded: its rows (chunk ids, index hashes), vocabulary, raw postings and
    the base rows it declares dead."""

    def __init__(self, base: str, chunk_ids: list[str], hashes: list[str], terms: list[str],
                 raw: dict[str, np.ndarray], dead: np.ndarray):
        self.base, self.chunk_ids, self.hashes, self.terms, self.raw = base, chunk_ids, hashes, terms, raw
        self.dead = np.asarray(dead, dtype=np.int64)
        self.vocab = {t: i for i, t in enumerate(terms)}

    @classmethod
    def load(cls, folder: Path) -> "Delta":
        try:
            meta = json.loads((folder / SEGMENT_META).read_text())
            with np.load(folder / SEGMENT_ARRAYS) as f:
                arrays = {k: f[k] for k in f.files}
            return cls(meta["base"], meta["chunk_ids"], meta["hashes"], meta["terms"],
                       {k: arrays[k] for k in ("indptr", "rows", "tf", "doc_len")}, arrays["dead"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"the BM25 delta segment {folder} is damaged ({exc}): `kbtool index` rebuilds it") from None

    def save(self, folder: Path) -> None:
        """Into a fresh folder (never one a state record names)."""
        folder.mkdir(parents=True)
        np.savez(folder / SEGMENT_ARRAYS, dead=self.dead, **self.raw)
        (folder / SEGMENT_META).write_text(json.dumps({"base": self.base, "chunk_ids": self.chunk_ids,
                                                       "hashes": self.hashes, "terms": self.terms}))


class BM25Index:
    """bm25s arrays on disk plus the chunk id of each row. A chunk's score is the sum over the query
    terms it holds of idf x tf / (tf + k1 x (1 - b + b x length / average length)), with Lucene's idf
    (``effective_params``): tests/test_bm25.py holds a plain implementation of it as the reference.

    With a delta segment (see ``DELTA_FRACTION``), rows are the *live* rows: the base rows not
    dead, in order, then the delta's rows; ``chunk_ids``, ``row_of``, masks and scores are over
    those, and every score comes from the raw postings of the live rows."""

    def __init__(self, retriever, chunk_ids: list[str]):
        self.retriever = retriever
        self.base_ids = chunk_ids
        self.chunk_ids = chunk_ids
        self.row_of = {cid: i for i, cid in enumerate(chunk_ids)}
        self.loaded_state: dict = {}  # the state record this index was loaded with (see ``current``)
        self.path: Path | None = None
        self.delta: Delta | None = None
        self._raw: dict | None = None
        self._held: dict = {}  # (kind, id of a chunk-id set) -> (the set, its mask or Scoped)
        self._live_of_base: np.ndarray | None = None  # base row -> live row (-1: dead); with a delta
        self._doc_len: np.ndarray | None = None  # live rows' lengths, with a delta
        self._all: Scoped | None = None  # statistics over every live row, with a delta

    def _attach(self, delta: Delta) -> None:
        """Take ``delta`` on: the live rows are the base's not dead, then the delta's."""
        raw = self.raw()
        alive = np.ones(len(self.base_ids), dtype=bool)
        alive[delta.dead] = False
        live_of_base = np.where(alive, np.cumsum(alive) - 1, -1)
        self.delta, self._live_of_base = delta, live_of_base
        self.chunk_ids = [c for c, a in zip(self.base_ids, alive.tolist()) if a] + list(delta.chunk_ids)
        self.row_of = {cid: i for i, cid in enumerate(self.chunk_ids)}
        self._doc_len = np.concatenate([raw["doc_len"][alive], delta.raw["doc_len"]])
        self._all = Scoped(self, np.ones(len(self.chunk_ids), dtype=bool))

    @staticmethod
    def exists(path: Path) -> bool:
        return (path / "chunk_ids.json").exists()

    @classmethod
    def build(cls, path: Path, chunk_ids: list[str], tokens: list[list[str]], params: dict,
              state: dict | None = None, hashes: list[str] | None = None) -> None:
        """Build into a fresh temporary folder, then swap it in; ``state`` (which catalog state it
        holds) is written inside, so the index and its record change together. ``hashes``: each
        row's index hash, which later delta segments are made against (without them a change
        rebuilds)."""
        import uuid

        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if chunk_ids:
            from itertools import chain

            params = effective_params(params)
            if params["method"] in FAST_METHODS:
                vocab = {t: i for i, t in enumerate(dict.fromkeys(chain.from_iterable(tokens)))}
                vocab.setdefault("", len(vocab))  # as bm25s: an empty token, held by no row
                raw = _raw_postings(vocab, tokens)
                retriever = _index_from_raw(params, vocab, raw)
            else:  # BM25L, BM25+: bm25s's own indexing (their scores need its non-occurrence array)
                retriever = _bm25s().BM25(k1=params["k1"], b=params["b"], method=params["method"])
                retriever.index(tokens, show_progress=False)
                raw = _raw_postings(retriever.vocab_dict, tokens)
            retriever.save(str(tmp), show_progress=False)
            np.savez(tmp / RAW_FILE, **raw)
        (tmp / "chunk_ids.json").write_text(json.dumps(chunk_ids))
        if hashes is not None:
            (tmp / ROWS_FILE).write_text(json.dumps({"id": uuid.uuid4().hex, "hashes": hashes}))
        (tmp / "state.json").write_text(json.dumps(state or {}))
        # Replace, never delete first: a crash leaves either the old or the new index in place.
        old = path.with_name(path.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def base_rows(path: Path) -> dict | None:
        """The base's identity and row hashes ({"id", "hashes"}); None for an index without them."""
        try:
            rec = json.loads((path / ROWS_FILE).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and "id" in rec and isinstance(rec.get("hashes"), list) else None

    @classmethod
    def write_delta(cls, path: Path, delta: Delta, state: dict) -> None:
        """Save ``delta`` into a fresh folder of ``path`` and switch to it with one atomic write of the
        state record (naming it); then remove the deltas no reader can still be loading (all but the
        new one and the one before it). A kill at any moment leaves the old record, and its delta."""
        import uuid

        before = cls.state(path).get("delta")
        name = f"delta-{state.get('generation', 0)}-{uuid.uuid4().hex[:8]}"
        delta.save(path / name)
        cls.set_state(path, {**state, "delta": name})
        for old in path.glob("delta-*"):
            if old.name not in (name, before):
                shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def state(path: Path) -> dict:
        """The catalog state the index on disk was built from ({} if unknown or missing)."""
        try:
            return json.loads((path / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    @staticmethod
    def set_state(path: Path, state: dict) -> None:
        """Record that the index on disk (unchanged) holds this catalog state (an atomic write)."""
        write_json(path / "state.json", state)

    @classmethod
    def chunk_ids_on_disk(cls, path: Path) -> list[str] | None:
        """The chunk id of every live row of the index in ``path`` (base rows not dead, then the
        delta's); None if it is missing or damaged."""
        try:
            ids = json.loads((path / "chunk_ids.json").read_text())
        except (OSError, ValueError):
            return None
        if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            return None
        name = cls.state(path).get("delta")
        if name:
            try:
                delta = Delta.load(path / name)
            except StoreError:
                return None
            dead = set(delta.dead.tolist())
            ids = [c for i, c in enumerate(ids) if i not in dead] + list(delta.chunk_ids)
        return ids

    @classmethod
    def load(cls, path: Path, state: dict | None = None) -> "BM25Index":
        """The index in ``path`` with the delta ``state`` (read now if not given) names."""
        if not cls.exists(path):
            raise StoreError(f"no BM25 index in {path.parent}: run `kbtool index`")
        state = cls.state(path) if state is None else state
        chunk_ids = None
        try:
            chunk_ids = json.loads((path / "chunk_ids.json").read_text())
        except (OSError, ValueError):
            pass
        retriever = None
        try:
            if not (isinstance(chunk_ids, list) and all(isinstance(i, str) for i in chunk_ids)):
                raise ValueError("chunk_ids.json is unreadable")
            if chunk_ids:
                retriever = _bm25s().BM25.load(str(path), mmap=True, show_progress=False)
        except Exception as exc:  # noqa: BLE001 - any damage of bm25s's files reads the same way
            raise StoreError(f"the BM25 index in {path} is damaged ({exc}): `kbtool index` rebuilds it") from None
        index = cls(retriever, chunk_ids)
        index.path = path
        if state.get("delta"):
            delta = Delta.load(path / state["delta"])
            rows = cls.base_rows(path)
            if rows is None or rows["id"] != delta.base or retriever is None:
                # a rebuild swapped another base in since the state record was read
                raise StoreError(f"the BM25 delta in {path} belongs to another base: `kbtool index` rebuilds it")
            index._attach(delta)
        return index

    def has_raw(self) -> bool:
        """Whether raw postings (term frequencies, lengths) are at hand: saved with the index since
        kbtool 15, else given by ``set_raw``."""
        if self._raw is None and self.path is not None and (self.path / RAW_FILE).exists():
            try:
                with np.load(self.path / RAW_FILE) as f:
                    self._raw = {k: f[k] for k in f.files}
            except (OSError, ValueError) as exc:
                raise StoreError(f"the BM25 index in {self.path} is damaged ({exc}): `kbtool index` rebuilds it") from None
        return self._raw is not None

    def set_raw(self, tokens: list[list[str]]) -> None:
        """Raw postings from each row's tokens (an index saved before they were saved with it)."""
        self._raw = _raw_postings(self.retriever.vocab_dict, tokens)

    def raw(self) -> dict:
        """The base's raw postings (token ids of the bm25s vocabulary, base rows)."""
        if not self.has_raw():
            raise StoreError("this BM25 index has no raw postings: run `kbtool index --rebuild`")
        return self._raw

    def doc_lengths(self) -> np.ndarray:
        """Each (live) row's length in tokens."""
        return self._doc_len if self.delta is not None else self.raw()["doc_len"]

    def live_postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        """(live rows ascending, float32 term frequencies) of this token over the base and delta."""
        parts_r, parts_t = [], []
        tid = self.retriever.vocab_dict.get(token) if self.retriever is not None else None
        if tid is not None:
            raw = self.raw()
            start, end = raw["indptr"][tid], raw["indptr"][tid + 1]
            rows, tf = raw["rows"][start:end], raw["tf"][start:end]
            if self.delta is not None:
                rows = self._live_of_base[rows]
                keep = rows >= 0
                rows, tf = rows[keep], tf[keep]
            parts_r.append(rows.astype(np.int64))
            parts_t.append(tf)
        did = self.delta.vocab.get(token) if self.delta is not None else None
        if did is not None:
            raw = self.delta.raw
            start, end = raw["indptr"][did], raw["indptr"][did + 1]
            parts_r.append(raw["rows"][start:end].astype(np.int64) + (len(self.chunk_ids) - len(self.delta.chunk_ids)))
            parts_t.append(raw["tf"][start:end])
        if not parts_r:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if len(parts_r) == 1:
            return parts_r[0], parts_t[0]
        return np.concatenate(parts_r), np.concatenate(parts_t)

    def knows(self, token: str) -> bool:
        """Whether the token is in a segment's vocabulary (it may have no live row)."""
        return ((self.retriever is not None and token in self.retriever.vocab_dict)
                or (self.delta is not None and token in self.delta.vocab))

    def scoped(self, visible: np.ndarray | None) -> "Scoped | None":
        """Statistics over the visible rows; None when every row is visible (the stored scores hold,
        or with a delta the index's own statistics over its live rows)."""
        if visible is None or self.retriever is None or bool(visible.all()):
            return None
        return Scoped(self, visible)

    def _effective(self, scoped: Scoped | None) -> Scoped | None:
        return scoped if scoped is not None else self._all

    def held(self, kind: str, ids: set[str]):
        """``mask(ids)`` (kind "mask") or ``scoped(mask(ids))`` (kind "scoped"), kept while the same
        set object is asked for again: a filter's scope is one object per catalog generation
        (``Store.memo``), so a server's or an eval's questions build each once, not per question."""
        key = (kind, id(ids))
        got = self._held.get(key)
        if got is not None and got[0] is ids:
            return got[1]
        value = self.mask(ids) if kind == "mask" else self.scoped(self.mask(ids))
        if len(self._held) >= 16:
            self._held.pop(next(iter(self._held.copy()), None), None)  # a copy: request threads share the index
        self._held[key] = (ids, value)
        return value

    def mask(self, allowed: set[str]) -> np.ndarray:
        """A row mask for ``search``: True for the chunks a filter allows. Build it once per filter."""
        mask = np.zeros(len(self.chunk_ids), dtype=bool)
        mask[[self.row_of[c] for c in allowed if c in self.row_of]] = True
        return mask

    def scores(self, tokens: list[str], mask: np.ndarray | None = None,
               scoped: Scoped | None = None) -> np.ndarray | None:
        """BM25 score of every row for these query tokens (0 outside ``mask``); None if the index is
        empty. ``scoped``: statistics over the rows a caller may see (``scoped()``), else all rows."""
        if self.retriever is None:
            return None
        scoped = self._effective(scoped)
        known = [t for t in tokens if self.knows(t)]
        if not known:
            return np.zeros(len(self.chunk_ids))
        if scoped is None:
            vocab = self.retriever.vocab_dict
            scores = np.asarray(self.retriever.get_scores([vocab[t] for t in known]), dtype=np.float64)
        else:  # as bm25s sums: float32, token by token in query order
            acc = np.zeros(len(self.chunk_ids), dtype=np.float32)
            for t in known:
                rows, data = scoped.postings(t)
                np.add.at(acc, rows, data)
            scores = acc.astype(np.float64)
        return np.where(mask, scores, 0.0) if mask is not None else scores

    def top(self, scores: np.ndarray | None, k: int) -> list[tuple[str, float]]:
        """Top-k (chunk_id, score) with score > 0 from ``scores()``, ties broken by chunk id."""
        if scores is None:
            return []
        candidates = np.flatnonzero(scores > 0)
        if len(candidates) > k:
            candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
            # keep every candidate tied with the k-th score so tie-breaking by id is exact
            kth = scores[candidates].min()
            candidates = np.flatnonzero(scores >= kth)
        ranked = sorted(((self.chunk_ids[i], float(scores[i])) for i in candidates), key=lambda x: (-x[1], x[0]))
        return ranked[:k]

    def search(self, tokens: list[str], k: int, mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """Top-k (chunk_id, score) with score > 0, ties broken by chunk id; ``mask`` from ``mask()``."""
        return self.top(self.scores(tokens, mask), k)

    def _postings(self, token: str, scoped: Scoped | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of a token the index knows (``knows``)."""
        scoped = self._effective(scoped)
        if scoped is not None:
            return scoped.postings(token)
        sc = self.retriever.scores
        token_id = self.retriever.vocab_dict[token]
        start, end = sc["indptr"][token_id], sc["indptr"][token_id + 1]
        return sc["indices"][start:end], sc["data"][start:end]

    @property
    def idf_method(self) -> str:
        return getattr(self.retriever, "idf_method", None) or DEFAULT_PARAMS["method"]

    def n_rows(self, mask: np.ndarray | None = None) -> int:
        """The (live) rows, or those ``mask`` permits."""
        return len(self.chunk_ids) if mask is None else int(mask.sum())

    def rows_holding(self, token: str) -> np.ndarray | None:
        """The live rows (ascending) whose chunk holds this analysed token; None when every row
        does (a Robertson index keeps no postings for a term in most chunks)."""
        if self.retriever is None or not self.knows(token):
            return np.zeros(0, dtype=np.int64)
        rows, _ = self._postings(token)
        if not len(rows) and self._all is None:
            return None
        return rows

    def df(self, token: str, mask: np.ndarray | None = None) -> int:
        """How many (live, permitted) chunks hold this analysed token."""
        if self.retriever is None or not self.knows(token):
            return 0
        rows, _ = self._postings(token)
        if not len(rows) and self._all is None:  # a Robertson index keeps no postings for a term in most chunks
            return self.n_rows(mask)
        return int(mask[rows].sum()) if mask is not None else len(rows)

    def bound(self, tokens: list[str], mask: np.ndarray | None = None, scoped: Scoped | None = None) -> float:
        """The score of a chunk as good as the best chunk on every query token: the sum, over the
        tokens, of the best score any chunk gets for it. A token no chunk holds counts as a rare
        term held once (idf of one chunk x tf-saturation at average length, 1 / (1 + k1)).
        ``scoped``: scores from the statistics of the rows a caller may see."""
        if self.retriever is None:
            return 0.0
        n = self.n_rows(mask)
        k1 = float(getattr(self.retriever, "k1", 1.2))
        rare = idf(self.idf_method, 1, n) / (1.0 + k1)
        scoped = self._effective(scoped)
        total = 0.0
        for t in tokens:
            if not self.knows(t):
                total += rare
                continue
            rows, data = self._postings(t, scoped)
            if not len(rows) and scoped is None:
                continue  # no stored postings: idf 0 (a Robertson index built before Lucene's)
            if mask is not None:
                data = data[mask[rows]]  # only permitted chunks shape what a caller sees
            total += float(data.max()) if len(data) else rare
        return total

    def has_term(self, token: str, mask: np.ndarray | None = None) -> bool:
        """Whether any chunk (within ``mask``) holds this analysed token."""
        if self.retriever is None or not self.knows(token):
            return False
        rows, _ = self._postings(token)
        if not len(rows):
            # in a Robertson index (before Lucene's) a token in most chunks has no stored postings
            return self._all is None
        return mask is None or bool(mask[rows].any())

    def vocabulary(self) -> list[str]:
        """Every token of the segments' vocabularies (with a delta, one whose chunks all died may be
        among them: ``has_term`` tells)."""
        if self.retriever is None:
            return []
        words = list(self.retriever.vocab_dict)
        if self.delta is not None:
            words += [t for t in self.delta.terms if t not in self.retriever.vocab_dict]
        return words

    @classmethod
    def current(cls, path: Path, loaded: "BM25Index | None") -> "BM25Index":
        """``loaded`` if it still is what ``path`` holds, else the index on disk, (re)loaded: a
        long-lived reader sees another process's rebuild or delta, and a load falling between the
        two renames of a swap (or finding a delta removed or from another base) retries once."""
        on_disk = cls.state(path)
        if loaded is not None and (not on_disk or on_disk == loaded.loaded_state):
            return loaded
        try:
            index = cls.load(path, on_disk)
        except StoreError:
            import time

            time.sleep(0.2)
            on_disk = cls.state(path)
            index = cls.load(path, on_disk)
        # Labelled with the state read before loading (which names the delta loaded): a rebuild
        # swapped in during the load makes the next call reload (read after, an old index labelled
        # new was kept for good).
        index.loaded_state = on_disk
        return index


def _bm25s():
    """bm25s, imported without its optional numba and scipy backends (unless the process already
    has them): kbtool uses its numpy code paths only, and those two imports cost ~0.2 s of every
    cold query."""
    import sys

    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    hidden = [m for m in ("numba", "scipy", "scipy.sparse") if m not in sys.modules]
    for m in hidden:
        sys.modules[m] = None  # makes `import m` raise ImportError, which bm25s handles
    # bm25s's own switch for its progress bars (kbtool shows its own): tqdm.auto imports tqdm and
    # asyncio, ~40 ms of a cold query.
    quiet = "DISABLE_TQDM" not in os.environ
    if quiet:
        os.environ["DISABLE_TQDM"] = "1"
    try:
        import bm25s
    finally:
        for m in hidden:
            sys.modules.pop(m, None)
        if quiet:
            os.environ.pop("DISABLE_TQDM", None)
    return bm25s
