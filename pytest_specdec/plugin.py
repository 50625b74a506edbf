"""Placeholder until hooks land."""
