"""infra/children.py — the experiment runners' child processes (tools/reference.py, tools/mediation.py): each child
ends with its runner however the runner dies, and a failed child is reported by its own last line."""
import ctypes
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm


class ExperimentFailed(Exception):
    """An experiment's run exited non-zero; its message is the last line of the run's log."""


def end_with_parent():
    """In the child, before it runs: the kernel sends it SIGTERM when this runner dies, however it dies (a kill -9
    included), so no continual.py goes on as an orphan writing a directory a rerun would write too; SIGTERM saves
    the step's state and stops the child as Ctrl-C does."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass   # not Linux: the child outlives a killed runner (docs/RELIABILITY.md)


def last_line(path):
    """The last non-empty line of a log file: what a failed child said."""
    try:
        lines = [line.strip() for line in open(path, errors="replace") if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(its log is empty)"


def run_child(cmd, log, name, cwd):
    """Run `cmd` with its output appended to `log` (after a line with the time and the command). A child stopped by
    Ctrl-C raises KeyboardInterrupt (its stages are kept); any other failure ExperimentFailed with its last line."""
    with open(log, "a") as f:
        f.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(cmd[1:])}\n")
        f.flush()
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, preexec_fn=end_with_parent, cwd=cwd).returncode
    if code in (130, -signal.SIGINT):   # the child stopped for Ctrl-C (its stages kept): the runner stops too, 130
        raise KeyboardInterrupt
    if code != 0:
        raise ExperimentFailed(f"{name} stopped (exit {code}): {last_line(log)} (its whole log: {log}; rerun the "
                               f"same command to resume it)")


def run_all(units, work, jobs, desc):
    """work(unit) for every unit, `jobs` at a time, under one progress bar. A failed child ends the command with its
    one error line (exit 1); a Ctrl-C with exit 130, each experiment keeping what it saved."""
    bar = tqdm(total=len(units), desc=desc, unit="exp", dynamic_ncols=True)

    def one(unit):
        work(unit)
        bar.update(1)
    try:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, units))
    except ExperimentFailed as e:
        bar.close()
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        bar.close()
        print("\nstopped: each experiment keeps its completed stages; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    bar.close()
