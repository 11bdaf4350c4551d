"""Golden outputs of the commands (see tests/cli/test_golden.py) and the script that makes them."""
