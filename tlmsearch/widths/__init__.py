"""The width math: schedules, search spaces, setting dimensions, budgets, heads.

Pure Python (no torch, ray or optuna): `tlmsearch validate` and `tlmsearch widths` answer
from here in about a second. See docs/contributing.md, "Package layout".
"""
