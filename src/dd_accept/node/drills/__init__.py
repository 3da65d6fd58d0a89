"""Drill scripts run by srun on compute nodes (shell: they stand in for the SUT's launch path)."""
