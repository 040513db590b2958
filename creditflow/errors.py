"""User-facing errors. The CLI prints these as one line (what and where) and exits with code 2."""


class UserError(Exception):
    """Bad input from the user: unknown name, bad option, malformed file, missing path."""
