"""Replay buffers: preallocated rings behind one interface (add, sample, state); and MiniGo's
window of generations (`window`), which the same update step samples."""
