"""User-facing errors.

Every error a user can cause by bad input is a `CatsimError`: the CLI prints its message on
one line and exits with code 2; library callers catch it as a `ValueError`.
"""


class CatsimError(ValueError):
    """Invalid input or configuration; the message is one line meant for the user."""


class CatsimWarning(UserWarning):
    """A setting that runs but probably not as meant (e.g. pass@k's k equal to the group size);
    the CLI prints it as one line `catsim <command>: warning: ...`."""
