"""Bundled pretraining presets (``tiny``, ``mini``, ``base``) as YAML package data."""
