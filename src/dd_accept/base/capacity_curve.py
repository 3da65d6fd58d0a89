"""Where a capacity run keeps its curve and what each line is: written by the scenario, drawn
by the report, so both read the names from here (like `drain_outcomes.MARKS`)."""

from __future__ import annotations

CURVE_FILE = "capacity-curve.jsonl"  # in the run directory, and so in the bundle's events/
CURVE_KIND = "capacity_level"  # each line: one level of the ladder as measured
