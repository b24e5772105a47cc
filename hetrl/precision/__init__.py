"""Precision policies: the dtype each part of training computes in."""
