"""Replay buffers: preallocated rings behind one interface (add, sample, state)."""
