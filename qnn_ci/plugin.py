"""The pytest plugin: collects qnn-ci manifests into test items (see README)."""

from __future__ import annotations
