"""Metrics against hand-computed values and against ranx on the same runs."""

import math

import pytest

from kbtool.evaluation import metrics as m

LOG = math.log2

# Ranking a b c d e; relevant: b (grade 2), d (grade 1), z (grade 3, never retrieved); c judged 0.
RANK = ["a", "b", "c", "d", "e"]
QRELS = {"b": 2, "d": 1, "z": 3, "c": 0}


def test_hit_rate():
    assert m.hit_rate(RANK, QRELS, 1) == 0.0
    assert m.hit_rate(RANK, QRELS, 2) == 1.0


def test_mrr():
    assert m.mrr(RANK, QRELS, 1) == 0.0
    assert m.mrr(RANK, QRELS, 5) == 0.5


def test_precision_divides_by_k_even_past_the_list():
    assert m.precision(RANK, QRELS, 2) == 0.5
    assert m.precision(RANK, QRELS, 10) == 2 / 10


def test_recall():
    assert m.recall(RANK, QRELS, 3) == pytest.approx(1 / 3)
    assert m.recall(RANK, QRELS, 100) == pytest.approx(2 / 3)


def test_average_precision():
    # relevant at ranks 2 and 4: (1/2 + 2/4) / 3 relevant
    assert m.average_precision(RANK, QRELS, 5) == pytest.approx((0.5 + 0.5) / 3)
    assert m.average_precision(RANK, QRELS, 3) == pytest.approx(0.5 / 3)


def test_ndcg_graded_with_ideal_from_all_judged():
    dcg = 2 / LOG(3) + 1 / LOG(5)
    idcg5 = 3 / LOG(2) + 2 / LOG(3) + 1 / LOG(4)
    assert m.ndcg(RANK, QRELS, 5) == pytest.approx(dcg / idcg5, abs=1e-12)
    assert m.ndcg(RANK, QRELS, 2) == pytest.approx((2 / LOG(3)) / (3 / LOG(2) + 2 / LOG(3)), abs=1e-12)


def test_ndcg_binary_perfect_and_empty():
    assert m.ndcg(["x", "y"], {"x": 1, "y": 1}, 10) == 1.0
    assert m.ndcg([], {"x": 1}, 10) == 0.0
    assert m.ndcg(["x"], {}, 10) == 0.0


def test_no_relevant_retrieved_is_zero_everywhere():
    for name in m.METRICS:
        assert m.score(f"{name}@3", ["p", "q"], {"x": 1}) == 0.0


def test_unknown_metric_lists_the_valid_ones():
    with pytest.raises(ValueError, match="hit_rate, mrr, ndcg"):
        m.parse_metric("ndgc@10")
    with pytest.raises(ValueError):
        m.parse_metric("ndcg")
    assert m.parse_metric("map@100") == ("map", 100)


def test_equal_to_ranx_on_the_same_runs():
    ranx = pytest.importorskip("ranx")
    qrels = {
        "q1": {"b": 2, "d": 1, "z": 3},
        "q2": {"a": 1},
        "q3": {"x": 4, "y": 1, "w": 2},
        "q4": {"n": 1},
    }
    runs = {
        "q1": RANK,
        "q2": ["a"],  # K larger than the list
        "q3": ["y", "v", "x", "u", "w", "t"],
        "q4": ["p", "q"],  # nothing relevant retrieved
    }
    run = ranx.Run({q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in runs.items()})
    names = [f"{b}@{k}" for b in m.METRICS for k in (1, 3, 5, 10)]
    theirs = ranx.evaluate(ranx.Qrels(qrels), run, names, return_mean=False, make_comparable=True)
    for name in names:
        ours = [m.score(name, runs[q], qrels[q]) for q in qrels]
        assert ours == pytest.approx(list(theirs[name]), abs=1e-6), name
