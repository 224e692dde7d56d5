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

# The code that runs in the fresh interpreter, before and around the program (trusted; it reads the
# job from stdin, which then goes away). Everything after `sys.addaudithook` is reachable by the
# program, so nothing there is worth having: the program's own inputs, its own results.
HARNESS = r'''
import io, json, os, resource, sys
job = json.loads(sys.stdin.read())
L = job["limits"]
# (2) OS limits, before any untrusted code
resource.setrlimit(resource.RLIMIT_CPU, (L["cpu"], L["cpu"]))
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
import math, itertools, functools, collections, heapq, bisect, string, re, fractions, operator, typing  # what programs use
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

outputs = []
try:
    compiled = compile(code, "<program>", "exec")
    sys.addaudithook(hook)
    if job["fn_name"]:   # functional tests: run the program once, call the function on every input
        sys.stdin, sys.stdout = io.StringIO(""), Capped()
        ns = {"__name__": "__main__"}
        exec(compiled, ns)
        fn = ns[job["fn_name"]]
        for args in job["inputs"]:
            try:
                outputs.append(["ok", json.loads(json.dumps(fn(*args)))])
            except BaseException:
                outputs.append(["error"])
    else:                # standard input / output: one run per input
        for text in job["inputs"]:
            sys.stdin, sys.stdout = io.StringIO(text), Capped()
            try:
                exec(compiled, {"__name__": "__main__"})
                outputs.append(["ok", sys.stdout.getvalue()])
            except BaseException:
                outputs.append(["error"])
except BaseException:   # it failed to compile, or raised at the top level: the outputs so far (none, or too few)
    outputs.append(["error"])
os.write(channel, (json.dumps(outputs) + "\n").encode())
'''


def parse_tests(tests):
    """{'fn_name', 'inputs', 'outputs'} from a record's tests (JSON text or a dict); None if unusable."""
    try:
        t = json.loads(tests) if isinstance(tests, str) else tests
        if not isinstance(t, dict) or not isinstance(t.get("inputs"), list) or not isinstance(t.get("outputs"), list):
            return None
        if not t["inputs"] or len(t["inputs"]) != len(t["outputs"]):
            return None
        return t
    except (ValueError, TypeError):
        return None


def same_value(got, expected):
    """A returned value against an expected one, both plain JSON values: numbers by value (2 == 2.0),
    booleans only equal booleans, lists/tuples element by element, dicts key by key."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return isinstance(got, bool) and isinstance(expected, bool) and got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        return got == expected
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(same_value(a, b) for a, b in zip(got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_value(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected


def passes(outputs, tests):
    """Whether a program's claimed outputs (a list of ["ok", value] / ["error"]) pass every test."""
    if not isinstance(outputs, list) or len(outputs) != len(tests["outputs"]):
        return False
    for out, exp in zip(outputs, tests["outputs"]):
        if not (isinstance(out, list) and len(out) == 2 and out[0] == "ok"):
            return False
        if tests.get("fn_name"):
            if not same_value(out[1], exp):
                return False
        elif not (isinstance(out[1], str) and out[1].strip() == str(exp).strip()):
            return False
    return True


def start(code, tests, workdir, uid, limits):
    """Launch one program's interpreter; it gets the code and the inputs, never the expected outputs."""
    job = {"code": code, "fn_name": tests.get("fn_name"), "inputs": tests["inputs"], "uid": uid,
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


def run_programs(jobs, limits=None):
    """Run (code, tests) pairs in the sandbox; returns 1.0 / 0.0 per job, in order. Never raises for
    anything a program does. Identical pairs run once (an RL group often repeats a program)."""
    limits = {**LIMITS, **(limits or {})}
    unique, slot = {}, []
    for code, tests in jobs:
        key = (code, tests if isinstance(tests, str) else json.dumps(tests, sort_keys=True))
        slot.append(unique.setdefault(key, len(unique)))
    scores = [0.0] * len(unique)
    todo = [(i, code, parse_tests(tests)) for (code, tests), i in unique.items()]
    todo = [(i, code, t) for i, code, t in todo if t is not None and isinstance(code, str)]
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="sandbox-") as tmp:
        running, sel = {}, selectors.DefaultSelector()
        while todo or running:
            while todo and len(running) < PARALLEL:    # start up to PARALLEL programs
                i, code, tests = todo.pop(0)
                uid = UID_BASE + i % 1000 if as_root else None
                workdir = os.path.join(tmp, str(i))
                os.mkdir(workdir, 0o700)
                if uid is not None:
                    os.chown(workdir, uid, uid)
                proc = start(code, tests, workdir, uid, limits)
                running[proc.stdout.fileno()] = (i, tests, proc, time.monotonic() + limits["wall"], bytearray())
                sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = min(r[3] for r in running.values())
            for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                i, tests, proc, end, buf = running[key.fd]
                chunk = os.read(key.fd, 65536)
                buf += chunk
                if chunk and len(buf) <= limits["result"]:
                    continue
                # end of its output (or over the cap): its verdict is decided here, from the last line
                sel.unregister(proc.stdout)
                stop(proc)
                del running[key.fd]
                if len(buf) <= limits["result"]:   # (over the cap, or not JSON: it stays 0)
                    with contextlib.suppress(ValueError):
                        lines = bytes(buf).decode().strip().splitlines()
                        scores[i] = 1.0 if lines and passes(json.loads(lines[-1]), tests) else 0.0
            now = time.monotonic()
            for fd in [fd for fd, r in running.items() if r[3] <= now]:   # out of time: 0
                proc = running.pop(fd)[2]
                sel.unregister(proc.stdout)
                stop(proc)
        sel.close()
    return [scores[i] for i in slot]
