"""Boards: declarations, locks, and running qnn-net-run on them."""
