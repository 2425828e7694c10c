"""Driving and reading back the Qualcomm QAIRT SDK tools."""
