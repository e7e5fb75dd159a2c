"""Stand-ins for train_gpt.py and for cluster launchers, used by tests/test_launch*.py."""
