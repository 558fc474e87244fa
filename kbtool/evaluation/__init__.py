"""Evaluation: question sets, ranking metrics, the evaluate() run and its reports."""
