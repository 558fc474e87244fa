"""Ingest: discover and parse files, then hand their blocks to chunking and the store."""
