"""sandbox.py — running the policy's programs (CODING) so that no program can cheat or do harm.

RL finds every loophole in its reward, so the grader assumes each program is hostile. The rule:
a program can only ever *claim* outputs; it never sees the expected ones, and it cannot reach the
grading process, another program, the files or the network.

    scores = run_programs([(code, tests_json), ...])    # 1.0 / 0.0 per program, in order

Layers, outermost first (the threat model, in the README's words, is in docs/RELIABILITY.md):
1. **A fresh interpreter per program** (`python -I -S`: no site, no user paths, an empty environment)
   in its own empty temporary directory and its own process session. It is given the program and the
   test *inputs* only. Its outputs come back as JSON on its own pipe, capped in size, and are compared
   with the expected outputs **here**, value by value: an object whose `__eq__` always says True
   cannot be serialised, and an `int` subclass serialises as the number it is.
2. **OS limits** set before the program runs: CPU seconds, address space, no file writes (size 0),
   few open files, no core dumps; the wall clock is enforced from here and the whole process session
   is killed at the end.
3. **Another user**, when this process runs as root (containers, CI): the program runs under a uid of
   its own (no other process has it) that may hold exactly one process, so it cannot fork, signal
   or read our processes (/proc/<pid>/environ), write our files, or leave a daemon behind.
4. **An audit hook** (PEP 578) inside the interpreter refuses every event outside a fixed list:
   files, sockets, subprocesses, fork, imports of anything not pre-loaded, ctypes, code objects made
   by hand. The list is a constant of the hook's own code, and the hook calls no name a program could
   replace, so nothing the program reaches (its frames, the hook's globals) can widen it.
Layers 1, 2 and 4 hold on any POSIX system; layer 3 needs root (Linux, macOS). Without root a
hostile program could still send signals to this user's processes if it got past layer 4.
"""
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

LIMITS = {"wall": 2.0, "cpu": 2, "mem": 512 * 2**20, "files": 16, "result": 1_000_000, "print": 100_000}
UID_BASE = 61000     # layer 3: program k of a batch runs as uid/gid UID_BASE + k (when we are root)
PARALLEL = 2         # programs run at once
# The modules a program may import: the release's allow list (its code grader,
# `feedback/code.py`). numpy and sortedcontainers are on it too but live outside the standard
# library, which a `-S` interpreter does not see (docs/PROTOCOL.md lists this difference).
ALLOWED_MODULES = ("math", "cmath", "itertools", "functools", "operator", "statistics", "random", "collections",
                   "heapq", "bisect", "array", "string", "re", "typing", "json", "io", "fractions", "decimal",
                   "dataclasses", "datetime", "time", "sys")
# The names the release's code grader puts into every program's namespace before running it ("Auto-import
# common typing aliases", `feedback/code.py`): a LiveCodeBench answer annotated `List[int]` needs no import.
TYPING_PRELUDE = ("Any", "Optional", "Union", "List", "Dict", "Set", "Tuple", "Callable", "Iterable", "Iterator",
                  "Sequence", "Mapping", "MutableMapping", "MutableSequence", "MutableSet", "DefaultDict", "Deque",
                  "FrozenSet", "Type", "TypeVar", "Generic", "Literal", "TypedDict", "NoReturn", "overload")

# The code that runs in the fresh interpreter, before and around the program (trusted; it reads the
# job from stdin, which then goes away). Everything after `sys.addaudithook` is reachable by the
# program, so nothing there is worth having: the program's own inputs, its own results.
# It writes one JSON line per test as the test ends: ["ok", value] or ["error", "Type: message"].
HARNESS = r"""
import io, json, os, resource, sys
job = json.loads(sys.stdin.read())
L = job["limits"]
# (2) OS limits, before any untrusted code
resource.setrlimit(resource.RLIMIT_CPU, (L["cpu"], L["cpu"] + 1))   # SIGXCPU at the limit (a time-out), SIGKILL 1 s on
resource.setrlimit(resource.RLIMIT_AS, (L["mem"], L["mem"]))
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
# (1) the result channel is a private copy of stdout; fds 0, 1, 2 become /dev/null
channel = os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.close(null)
resource.setrlimit(resource.RLIMIT_NOFILE, (L["files"], L["files"]))
import builtins, math, itertools, functools, collections, heapq, bisect, string, re, fractions, operator, typing, types
for name in job["preload"]:   # the allowed modules this program names (the audit hook refuses any later load)
    try:
        __import__(name)
    except ImportError:   # (not in this Python: the program's import of it fails, as it should)
        continue
if job["uid"] is not None:   # (3) a user of its own, allowed one process: this one
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    os.setgroups([])
    os.setgid(job["uid"])
    os.setuid(job["uid"])
class Capped(io.StringIO):   # printed text, bounded
    def write(self, s):
        if self.tell() + len(s) > L["print"]:
            raise MemoryError("print limit")
        return super().write(s)
code = job["code"]
if code.startswith("lambda"):
    code = "f = " + code
allowed = frozenset(job["allowed"])
real_import = builtins.__import__
def release_import(name, globals=None, locals=None, fromlist=(), level=0):
    # the release's grading rule (not a security layer: that is the audit hook)
    if level or name.split(".")[0] not in allowed:
        raise ImportError(f"Import of module '{name}' is not allowed")
    return real_import(name, globals, locals, fromlist, level)
program_builtins = dict(builtins.__dict__, __import__=release_import, open=None)
# the release's typing prelude: these names are in every program's namespace, as if imported
prelude = {name: getattr(typing, name) for name in job["typing"] if hasattr(typing, name)}

def send(outcome):
    os.write(channel, (json.dumps(outcome) + "\n").encode())

def failure(e):
    try:
        return ["error", (type(e).__name__ + ": " + str(e))[:250]]
    except BaseException:
        return ["error", "an exception"]

def the_function(ns, name):
    # the test's function: by name; else a LeetCode-style Solution().name; else the first function defined
    if callable(ns.get(name)):
        return ns[name]
    if isinstance(ns.get("Solution"), type) and callable(getattr(ns["Solution"], name, None)):
        return getattr(ns["Solution"](), name)
    return next(v for v in ns.values() if isinstance(v, types.FunctionType) and v.__code__.co_filename == "<program>")

def hook(event, args):
    # (4) Only these events pass. The set is a constant of this code object (replacing __code__ is
    # itself refused below); no global or builtin name is looked up, and `[][0]` raises without one.
    if event in {"exec", "compile", "object.__getattr__", "object.__delattr__", "sys._getframe",
                 "sys._getframemodulename", "builtins.input", "builtins.input/result", "time.sleep",
                 "random.seed"}:
        return
    if event == "object.__setattr__" and args[1] != "__code__":
        return
    [][0]

try:
    compiled = compile(code, "<program>", "exec")
    sys.addaudithook(hook)
    if job["fn_name"]:   # functional tests: run the program once, call the function on every input
        sys.stdin, sys.stdout = io.StringIO(""), Capped()
        ns = {"__name__": "__main__", "__builtins__": program_builtins, **prelude}
        exec(compiled, ns)
        fn = the_function(ns, job["fn_name"])
        for kind, args in job["inputs"]:
            try:
                send(["ok", json.loads(json.dumps(fn(**args) if kind == "kwargs" else fn(*args)))])
            except BaseException as e:
                send(failure(e))
    elif job["mode"] == "code":   # test code (asserts) run after the program, in its namespace
        sys.stdin, sys.stdout = io.StringIO(""), Capped()
        ns = {"__name__": "__main__", "__builtins__": program_builtins, **prelude}
        exec(compiled, ns)
        for test in job["inputs"]:
            try:
                exec(compile(test, "<test>", "exec"), ns)
                send(["ok", None])
            except BaseException as e:
                send(failure(e))
    else:                # standard input / output: one run per input
        for text in job["inputs"]:
            sys.stdin, sys.stdout = io.StringIO(text), Capped()
            try:
                exec(compiled, {"__name__": "__main__", "__builtins__": program_builtins, **prelude})
                send(["ok", sys.stdout.getvalue()])
            except BaseException as e:
                send(failure(e))
except BaseException as e:   # it failed to compile, or raised at the top level: the outputs so far
    send(failure(e))
"""


def parse_tests(tests):
    """{'fn_name', 'inputs', 'outputs', ...} from a record's tests (JSON text or a dict); None if unusable."""
    try:
        t = json.loads(tests) if isinstance(tests, str) else tests
        if not isinstance(t, dict) or not isinstance(t.get("inputs"), list) or not isinstance(t.get("outputs"), list):
            return None
        if not t["inputs"] or len(t["inputs"]) != len(t["outputs"]):
            return None
        return t
    except (ValueError, TypeError):
        return None


def call_of(test_input):
    """One functional test's input as a call: a list is the positional arguments (the built-in world), a
    dict the keyword arguments, a string LiveCodeBench's format — one JSON value per line."""
    if isinstance(test_input, dict):
        return ["kwargs", test_input]
    if isinstance(test_input, str):
        try:
            return ["args", [json.loads(line) for line in test_input.split("\n") if line.strip()]]
        except ValueError:
            return ["args", [test_input]]   # not JSON: the text itself (it will not match, as in the release)
    return ["args", list(test_input) if isinstance(test_input, (list, tuple)) else [test_input]]


def expected_value(tests, expected):
    """A functional test's expected value: in the release / LiveCodeBench format a JSON string."""
    if tests.get("testtype") == "functional" and isinstance(expected, str):
        try:
            return json.loads(expected)
        except ValueError:
            return expected
    return expected


def same_value(got, expected):
    """A returned value against an expected one, both plain JSON values: numbers by value (2 == 2.0),
    booleans only equal booleans, lists/tuples element by element, dicts key by key. (The release
    compares canonical JSON text, where 2.0 is not 2: docs/PROTOCOL.md.)"""
    if isinstance(got, bool) or isinstance(expected, bool):
        return isinstance(got, bool) and isinstance(expected, bool) and got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        return got == expected
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(same_value(a, b) for a, b in zip(got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_value(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected


def joined(text):
    """The release's standard-output rule: strip, and lines joined by one space (\\r dropped)."""
    return text.strip().replace("\n", " ").replace("\r", "")


def same_output(got, expected):
    """Printed output against the expected text, as the release compares them (an expected output
    ending in '-' loses it, as there)."""
    expected = str(expected).strip()
    if expected.endswith("-"):
        expected = expected[:expected.rfind("-")].rstrip()
    return joined(got) == joined(expected)


def passed_test(outcome, expected, tests):
    if not (isinstance(outcome, list) and len(outcome) == 2 and outcome[0] == "ok"):
        return False
    if tests.get("testtype") == "code":   # assert-style tests: passing is running without an exception
        return True
    if tests.get("fn_name"):
        return same_value(outcome[1], expected_value(tests, expected))
    return isinstance(outcome[1], str) and same_output(outcome[1], expected)


def passes(outputs, tests):
    """Whether a program's claimed outputs (a list of ["ok", value] / ["error", why]) pass every test."""
    if not isinstance(outputs, list) or len(outputs) != len(tests["outputs"]):
        return False
    return all(passed_test(out, exp, tests) for out, exp in zip(outputs, tests["outputs"]))


def limits_for(tests, limits):
    """A test file's own time limit (LiveCodeBench: 6 s) bounds the program, plus a second to start."""
    tl = tests.get("time_limit")
    if isinstance(tl, (int, float)) and not isinstance(tl, bool) and 0 < tl <= 60:
        return {**limits, "wall": max(limits["wall"], tl + 1.0), "cpu": max(limits["cpu"], int(tl) + 1)}
    return limits


def start(code, tests, workdir, uid, limits):
    """Launch one program's interpreter; it gets the code and the inputs, never the expected outputs."""
    functional = bool(tests.get("fn_name"))
    inputs = [call_of(x) for x in tests["inputs"]] if functional else [str(x) for x in tests["inputs"]]
    job = {"code": code, "fn_name": tests.get("fn_name"), "inputs": inputs, "uid": uid, "mode": tests.get("testtype"),
           "allowed": ALLOWED_MODULES, "typing": TYPING_PRELUDE, "preload": [m for m in ALLOWED_MODULES if m in code],
           "limits": {k: limits[k] for k in ("cpu", "mem", "files", "print")}}
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=workdir, env={"PATH": "/usr/bin:/bin"},
                            start_new_session=True)
    with contextlib.suppress(OSError):   # it died at once (a limit): it scores 0 below
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    return proc


def stop(proc):
    """Kill the program's whole session, reap it."""
    with contextlib.suppress(OSError):   # already gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def outcomes_of(buf, n_tests, timed_out):
    """The per-test outcomes a program sent (one JSON line each), completed to one per test: the test
    it was running when stopped is a timeout (or a crash), the ones after it never ran."""
    outcomes = []
    for line in bytes(buf).decode(errors="replace").splitlines()[:n_tests]:
        try:
            out = json.loads(line)
        except ValueError:
            out = ["error", "unreadable output"]
        outcomes.append(out)
    if len(outcomes) < n_tests and timed_out:
        outcomes.append(["timeout"])
    elif len(outcomes) < n_tests and not (outcomes and outcomes[-1][:1] == ["error"]):   # (after an error: not run)
        outcomes.append(["error", "the program stopped (a crash or a limit)"])
    return outcomes + [["not run"]] * (n_tests - len(outcomes))


def run_programs_detailed(jobs, limits=None):
    """Run (code, tests) pairs in the sandbox: per job (score 1.0 / 0.0, outcomes), in order, where
    outcomes has one entry per test: ["ok", claimed output], ["error", "Type: message"], ["timeout"]
    or ["not run"]; None when the tests are unusable. Never raises for anything a program does.
    Identical pairs run once (an RL group often repeats a program)."""
    limits = {**LIMITS, **(limits or {})}
    unique, slot = {}, []
    for code, tests in jobs:
        key = (code, tests if isinstance(tests, str) else json.dumps(tests, sort_keys=True, default=str))
        slot.append(unique.setdefault(key, len(unique)))
    results = [(0.0, None)] * len(unique)
    todo = [(i, code, parse_tests(tests)) for (code, tests), i in unique.items()]
    todo = [(i, code, t) for i, code, t in todo if t is not None and isinstance(code, str)]
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="sandbox-") as tmp:
        running, sel = {}, selectors.DefaultSelector()

        def finish(fd, timed_out):
            i, tests, proc, _, buf = running.pop(fd)
            sel.unregister(proc.stdout)
            stop(proc)
            # out of CPU seconds (RLIMIT_CPU: SIGXCPU) is out of time too, whichever limit struck first
            timed_out = timed_out or proc.returncode == -signal.SIGXCPU
            if len(buf) > limits["result"]:   # over the cap: nothing it claimed is read
                results[i] = (0.0, [["error", "output over the size limit"]] + [["not run"]] * (len(tests["outputs"]) - 1))
                return
            outcomes = outcomes_of(buf, len(tests["outputs"]), timed_out)
            results[i] = (1.0 if passes(outcomes, tests) else 0.0, outcomes)

        while todo or running:
            while todo and len(running) < PARALLEL:    # start up to PARALLEL programs
                i, code, tests = todo.pop(0)
                uid = UID_BASE + i % 1000 if as_root else None
                workdir = os.path.join(tmp, str(i))
                os.mkdir(workdir, 0o700)
                if uid is not None:
                    os.chown(workdir, uid, uid)
                lim = limits_for(tests, limits)
                proc = start(code, tests, workdir, uid, lim)
                running[proc.stdout.fileno()] = (i, tests, proc, time.monotonic() + lim["wall"], bytearray())
                sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = min(r[3] for r in running.values())
            for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                buf = running[key.fd][4]
                chunk = os.read(key.fd, 65536)
                buf += chunk
                if not chunk or len(buf) > limits["result"]:   # end of its output, or over the cap
                    finish(key.fd, timed_out=False)
            now = time.monotonic()
            for fd in [fd for fd, r in running.items() if r[3] <= now]:   # out of time
                finish(fd, timed_out=True)
        sel.close()
    return [results[i] for i in slot]


def run_programs(jobs, limits=None):
    """Run (code, tests) pairs in the sandbox; returns 1.0 / 0.0 per job, in order."""
    return [score for score, _ in run_programs_detailed(jobs, limits)]
