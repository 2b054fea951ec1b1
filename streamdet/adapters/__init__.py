"""Adapters: the thin I/O layers (embedded runner, inputs, outputs) around the engine."""
