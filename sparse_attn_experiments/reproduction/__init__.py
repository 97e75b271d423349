"""Pieces of the reproduction driver :mod:`..reproduce`."""
