"""infra/commands.py — what the analysis and tool commands share: a JSON file read with its checks (a regular file,
of a bounded size, valid JSON: a ValueError naming it), a command whose every failure ends in one `error:` line
and a non-zero exit, never a traceback, and one configuration's flags for the tools that call train.update
themselves. No run imports it."""
import contextlib
import json
import os
import stat
import sys

from infra.errors import one_line
from infra.flags import parser, per_seed

MAX_JSON_BYTES = 256 * 2**20   # (the largest results, log or archive index a command reads: a typo stops here)


def read_json(path, max_bytes=MAX_JSON_BYTES):
    """The JSON of a regular file (never a FIFO, a device or a folder, which would block or mislead) of at most
    max_bytes. OSError when it cannot be read; ValueError naming it when it is not a regular file, too large, or not
    valid JSON."""
    mode = os.stat(path)   # (OSError: missing, no permission)
    if not stat.S_ISREG(mode.st_mode):
        raise ValueError(f"{path}: not a regular file")
    if mode.st_size > max_bytes:
        raise ValueError(f"{path}: {mode.st_size:,} bytes, more than {max_bytes:,}")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:   # (JSONDecodeError and UnicodeDecodeError are ValueErrors)
        raise ValueError(f"{path}: not valid JSON ({one_line(e)[:120]})") from None


def run_command(main, argv=None):
    """Run a command's main; a failure it did not turn into its own message (a file that cannot be read or written,
    a value of the wrong type, a full disk) ends in one `error:` line naming the file where there is one, exit 1;
    Ctrl-C exits 130; a reader that left (`| head`) ends it quietly, 141, as SIGPIPE ends a Unix tool. Returns main's
    result."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        print("\ninterrupted (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:   # (it said "error: Broken pipe")
        # what is still buffered has nowhere to go: Python's flush at exit would fail again, so stdout goes to
        # /dev/null (a stdout with no file behind it, as under pytest, has nothing to redirect)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        sys.exit(f"error: {where}{e.strerror or one_line(e)}")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError, ZeroDivisionError) as e:
        sys.exit(f"error: {one_line(e)[:300]}")


def one_configuration(knobs, argv=()):
    """The flags of one configuration with every default, unchecked: for tools that call train.update themselves."""
    args = per_seed(parser("", "", knobs).parse_args(list(argv)))[0]
    for k in (k for k in knobs if k["field"].metadata.get("sweep")):   # (a sweep's comma list, as SDPO's α: one value)
        setattr(args, k["name"], k["field"].type(getattr(args, k["name"])))
    return args
