"""The error type every layer raises for problems the user can fix.

The CLI prints these as one clear message (no traceback) and exits with code 2.
"""


class VoxanonError(Exception):
    """Bad input, configuration or environment, described well enough to act on."""
