"""Beam searches the models and the tasks build: fairseq's, finishing on exact zeros
(:mod:`.zero_probability`), and with GNMT's coverage penalty (:mod:`.coverage_penalty`)."""
