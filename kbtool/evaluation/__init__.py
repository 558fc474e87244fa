"""Evaluation, from the bottom up: ``questions`` (question sets), ``metrics``, ``units`` (what a
hit list is scored on), ``provenance`` (fingerprints); ``evaluate`` (the run) and ``compare``
(gates, baselines, significance); ``calibrate`` (settings searched through the pipeline);
``report`` and ``outputs`` (HTML and files; they only render)."""
