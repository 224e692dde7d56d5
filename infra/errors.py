"""infra/errors.py — an exception as one line (the commands' checked reads and their one `error:` line are
infra/commands.py's)."""


def one_line(exc):
    """An exception as one line: the message of a ValueError/OSError, else 'Type: first line'."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return msg if isinstance(exc, (ValueError, OSError)) and msg else f"{type(exc).__name__}: {msg}"
