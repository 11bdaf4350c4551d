"""Command-line tests: they run the installed ``timeline`` console script in a subprocess.

The runner, :func:`tests.builders.run_timeline`, is shared with the other packages' command tests.
"""
