"""infra/safety.py — what a command may delete or write, and one writer per run directory.

Three rules every entry point follows (docs/RELIABILITY.md, "Nothing a user types loses data"):
* a command deletes or replaces only a directory it made itself: a run directory carries its program's name in
  its config.json (`owned_by`), and --overwrite replaces nothing else;
* a command writes under the repository's committed folders (results/, docs/, tests/, the models…) or over a
  file git tracks only with the flag that says so (`committed_path`);
* while a process writes a run directory it holds its lock (`RunLock`, a file in the machine's temporary folder);
  a second writer stops with one line naming the holder's pid.
Imports nothing of the project: it sits below everything that writes.
"""
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the repository's folders that hold committed work: nothing is written under them without the flag
COMMITTED_FOLDERS = ("results", "docs", "tests", "world", "infra", "beyond", "experiment", "classroom", "tools", ".ci", ".git")


def tracked(path):
    """Does git track `path` (a file, or a folder with tracked files) in this repository? False without git."""
    try:
        out = subprocess.run(["git", "-C", REPO, "ls-files", "--", os.path.relpath(path, REPO)],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def committed_path(path):
    """The reason `path` holds committed work (a committed folder of this repository, the repository itself, or
    a file git tracks), or None when a command may write there freely."""
    full = os.path.realpath(os.path.abspath(path))
    if full == REPO or REPO.startswith(full + os.sep):
        return "the repository itself" if full == REPO else "a folder holding the repository"
    if not full.startswith(REPO + os.sep):
        return None
    top = os.path.relpath(full, REPO).split(os.sep)[0]
    if top in COMMITTED_FOLDERS:
        return f"under {top}/, which holds committed work"
    if os.path.exists(full) and tracked(full):
        return "tracked by git"
    return None


def refuse_committed(error, flag, path, allowed=False, allow_flag="--overwrite-committed"):
    """error(message) (argparse's ap.error: one line, exit 2) when `path` holds committed work and `allowed` is
    not set; the message names the flag that allows it."""
    why = None if allowed else committed_path(path)
    if why:
        error(f"{flag} {path}: {why}; nothing was written. Give a path outside the repository's committed folders "
              f"(runs/ is yours), or {allow_flag} to write there on purpose")


def owned_by(run_dir, program):
    """Was `run_dir` made by `program` (e.g. "continual.py")? Its config.json says so (`"program"`), or, for run
    directories made before the field, has the program's own keys (`legacy_keys`)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    return config.get("program") == program or (
        "program" not in config and all(k in config for k in LEGACY_KEYS.get(program, ("-",))))


# what a program's config.json held before it named the program (run directories made before 2026-12-04)
LEGACY_KEYS = {"continual.py": ("method", "stages", "benchmarks", "eval_n")}


def private_temp(name):
    """<tmp>/sdpo-<uid>/<name>: a folder of this user's own in the machine's temporary folder (mode 700, owned by
    this user, never a link), made when missing. Another user's locks and caches never mix with ours, and a folder
    planted there by someone else is refused (OSError naming it) instead of being read or written."""
    base = os.path.join(tempfile.gettempdir(), f"sdpo-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(errno.EPERM, f"{base} is not this user's private folder (a link, another owner, or open to "
                                   f"others): remove it, or set TMPDIR to a folder of your own", base)
    path = os.path.join(base, name)
    os.makedirs(path, exist_ok=True)
    return path


def lock_path(run_dir):
    """The lock file of a run directory: in this user's private temporary folder, named by the directory's real
    path, so that nothing is added to the run directory or to the folder that holds it (the lock survives its
    replacement)."""
    full = os.path.realpath(os.path.abspath(run_dir)).rstrip(os.sep)
    return os.path.join(private_temp("run-locks"), hashlib.sha1(full.encode()).hexdigest()[:20] + ".lock")


class RunLock:
    """An exclusive lock on a run directory while a process writes it (the file `lock_path(run_dir)`, flock: the
    kernel drops it when the process dies, so a killed run never leaves a stale lock). `held_by` names the pid
    of a process already holding it, else None. (flock works between processes of one machine: two machines
    writing one shared folder are not stopped by it.)"""

    def __init__(self, run_dir):
        self.path, self.fd = lock_path(run_dir), None

    def acquire(self):
        """True when this process now holds the lock; False when another does (then `held_by()` says who)."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return True

    def held_by(self):
        try:
            return int(open(self.path).read().strip() or 0) or None
        except (OSError, ValueError):
            return None

    def holder(self):
        """The pid of the live process that holds this lock, or None when none does (a shared lock tried and let go
        at once: a run that is being written holds it exclusively)."""
        if not os.path.exists(self.path):
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except OSError:
            return self.held_by() or -1
        finally:
            os.close(fd)

    def release(self):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def code_version(repo=REPO):
    """The code a run was made with: the repository's commit, with "+changes" when tracked files differ from it
    (git status), or "unknown" outside a git checkout. Recorded in each run's config.json."""
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
