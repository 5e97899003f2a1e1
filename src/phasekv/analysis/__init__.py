"""Mechanistic analyses: gate concentration, gate cycling, KV-head knockouts."""
