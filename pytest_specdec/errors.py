"""The one exception type for mistakes in user input.

pytest shows a `SpecdecUsageError` raised at configure time as a usage error (one line, exit 4),
not a traceback, so every message must name the input and the fix.
"""


class SpecdecUsageError(Exception):
    """Bad user input: a config key, flag value, baseline or prompt file, or a missing model."""
