"""Actors: where policy copies act, and in which precision (hetrl.quant makes the copies)."""
