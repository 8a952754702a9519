"""Reporters: they format results and never measure anything."""
