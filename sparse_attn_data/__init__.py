"""Corpus preparation: one module per corpus, plus the synthetic corpus generator."""
