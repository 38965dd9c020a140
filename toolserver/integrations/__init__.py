"""Adapters that plug toolserver into other frameworks. Each imports its framework only when used."""
