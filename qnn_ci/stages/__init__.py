"""Pipeline stages: one thin adapter per stage."""
