"""Makes test modules here importable as ``native.<name>``: two ``test_eplb.py`` files share a basename."""
