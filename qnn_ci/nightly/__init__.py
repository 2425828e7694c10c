"""Nightly regression: baselines, the regression check, run history and trends."""
