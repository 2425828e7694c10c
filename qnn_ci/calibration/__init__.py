"""Calibration data: input lists, raw tensor files, and where samples come from."""
