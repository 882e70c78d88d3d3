"""Dispatch backends: where a campaign actually runs."""
