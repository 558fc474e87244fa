"""Query: turn a question into ranked hits (dense, BM25, fused)."""
