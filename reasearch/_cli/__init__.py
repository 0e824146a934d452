"""Subcommand modules of the reasearch CLI."""
