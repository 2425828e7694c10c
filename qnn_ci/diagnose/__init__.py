"""Diagnosis of a failing numeric check: where the error enters (attribution,
first diverging layer) and which setting fixes it (the recipe advisor).
The shared result types are in ``qnn_ci.diagnose.model``."""
