"""Acceptance scenarios, written as pytest tests so they run under plain pytest too."""
