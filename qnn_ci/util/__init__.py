"""Helpers any layer may use: bounded file reads, lists cut for messages, this
process's cores and memory, the on-disk memo."""
