"""The root of the kit's errors: every error the kit raises about its input, its machine or a trial
derives from ``FieldtestError``, so the command line catches this one type and prints one line.

No imports, so any layer may use it (as ``fieldtest.names``)."""


class FieldtestError(Exception):
    """A problem the kit can name in one line (a file and field, a missing program, a trial that
    cannot run); the message says what and, where there is one, the fix."""
