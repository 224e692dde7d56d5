"""infra/errors.py — an exception as one line (the commands' checked reads and their one `error:` line are
infra/commands.py's)."""


def one_line(exc):
    """An exception as one line: the message of a ValueError/OSError, else 'Type: first line'."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return msg if isinstance(exc, (ValueError, OSError)) and msg else f"{type(exc).__name__}: {msg}"


class BadData(ValueError):
    """Data a run was given that it cannot run (every prompt longer than the model's positions allow): the run
    directory's handler ends it in one `error:` line, its completed stages kept (experiment/rundir.py)."""
