"""Where the farm's own files are: the checkout and its data, one home for every module that reads them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: matrix.toml, recipes/, docker/, csrc/
DATA = REPO / "builder" / "data"  # the farm's facts in TOML, and the evidence ledger
TEMPLATES = REPO / "builder" / "templates"
