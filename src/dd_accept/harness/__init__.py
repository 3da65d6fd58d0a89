"""Orchestration and the command line: what a user runs, and how exit codes are decided."""
