"""world/sandbox.py — running the policy's programs (CODING) so that no program can cheat or do harm.

RL finds every loophole in its reward, so the grader assumes each program is hostile. The rule:
a program can only ever *claim* values; it never sees the expected ones and never decides pass or
fail, and it cannot reach the grading process, another program, the files or the network.

    scores = run_programs([(code, tests_json), ...])    # 1.0 / 0.0 per program, in order

Layers, outermost first (which layer stops which attack: docs/RELIABILITY.md):
0. **An OS jail** (Linux namespaces) around a batch's programs: bubblewrap where it is installed, else
   util-linux's `unshare` (as root, unshare first). No network, a PID namespace of its own (no process
   outside is visible, no signal gets out, every process of the batch dies with it), a read-only view of
   /usr and the interpreter only, nothing writable at all, no /proc, no environment, no capabilities,
   uid 61000, which is uid 61000 outside too and owns nothing. Without either jail, CODING is refused
   (NoJail) unless --unsafe-code says to run with layers 0b–4 only.
0b. **A fresh interpreter per program, born under a seccomp filter** (x86-64 and arm64): the jail's
   interpreter forks one child per program, which keeps only its own job and result pipe, takes the
   limits, installs a filter that refuses every system call by which one process reaches another
   (signals, F_SETOWN, pidfds, ptrace, another's memory, scheduling or limits), new processes, sockets,
   keyrings and IPC, and then execs `python -I -S` on RUNNER: the program's process never holds ctypes,
   the harness or another program's code. Elsewhere each program gets a jail of its own.
1. **Grading here**: the program is given the test *inputs* only. For functional and standard-input
   tests it returns the values it computed; for assert-style tests the asserts are parsed here (ast)
   and it is sent only the calls into it, never a comparison or an expected value (any other part of a
   check is evaluated here, or the test is unusable). What comes back is JSON on its own pipe, capped in
   size and in nesting depth, and it is compared with the expected values **here**, in linear time: an
   object whose `__eq__` always says True cannot be serialised, and an `int` subclass serialises as the
   number it is.
2. **OS limits** set before the program runs: CPU seconds, address space, no file writes (size 0),
   few open files, no core dumps; the wall clock is enforced by the jail's interpreter, and from here
   the jail is killed when its programs' time is up.
3. **Another user**: inside the jail, uid 61000; with --unsafe-code as root, uid 61000 + k with room for
   exactly one process.
4. **An audit hook** (PEP 578) inside the interpreter refuses every event outside a fixed list:
   files, sockets, subprocesses, fork, imports of anything not pre-loaded, ctypes, code objects made
   by hand. The list is a constant of the hook's own code, and the hook calls no name a program could
   replace, so nothing the program reaches (its frames, the hook's globals) can widen it. It is a
   Python-level fence: the hooks are cleared at interpreter shutdown (a program's process ends with
   os._exit, which skips it), and a bug in CPython could bypass it: that is why layers 0 and 0b exist.
"""
import ast
import collections
import contextlib
import ctypes
import datetime
import decimal
import fractions
import functools
import json
import math
import operator
import os
import pwd
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

try:
    import numpy
except ImportError:   # (a test's np.isclose is then unusable)
    numpy = None

LIMITS = {"wall": 2.0, "cpu": 2, "mem": 512 * 2**20, "files": 16, "result": 1_000_000, "print": 100_000,
          "signals": 8}
MAX_DEPTH = 64       # the deepest JSON nesting read back from a program (deeper: its own outcome is an error)
UID_BASE = 61000     # layer 3: the uid inside the jail; with --unsafe-code as root, program k runs as UID_BASE + k
PARALLEL = 2         # programs run at once
JAILS = ("subuid", "bwrap", "unshare")   # layer 0, in order of preference: the first that works on this machine
ALLOW_UNJAILED = False         # --unsafe-code: run CODING programs without layer 0 (inner layers only)
SHARED_JAIL = True   # layer 0b: a batch's programs share one jail, each in a process of its own under a seccomp filter
# Fail closed: a layer that cannot be installed stops its program before it runs, and says which (exit codes)
LAYERS = {91: "the OS limits (2)", 92: "not dumpable (0b)", 93: "no new privileges (0b)", 94: "the seccomp filter (0b)",
          95: "the fresh interpreter (0b)", 96: "the program's own user (3)", 97: "the audit hook (4)"}
FAIL_LAYER = None   # for tests only: make one layer's set-up fail ("jail", "limits", ..., "hook"; tests/test_sandbox.py)
# (0b) The system calls a program never needs, refused (EPERM) under the filter: those by which one process
# reaches another (signals, pidfds, ptrace, another's memory, pages or robust list, its scheduling, priority
# or limits), new processes and programs, namespaces and mounts, sockets (no AF_VSOCK, no netlink), keyrings,
# SysV and POSIX IPC (memory outside the address-space limit), io_uring, bpf, perf events and userfaultfd.
# Round four adds vmsplice, splice and tee (pipes holding pages outside the address-space cap), the sync family
# (the host's writeback), the io_* AIO calls (the machine's aio-max-nr table), fadvise64 and readahead (the host's
# page cache). Four are checked rather than refused: execve (only the child's own start of the fresh
# interpreter), fcntl (an allow list: FCNTL_ALLOWED), prlimit64 (its own pid only) and madvise (MADVISE_ALLOWED).
# Per machine: (AUDIT_ARCH_*, {name: number} refused, {name: number} checked); elsewhere no filter.
SYSCALLS = {
    "x86_64": (0xC000003E,
               {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
                "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "ptrace": 101,
                "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "process_madvise": 440,
                "migrate_pages": 256, "move_pages": 279, "get_robust_list": 274, "sched_setparam": 142,
                "sched_setscheduler": 144, "sched_setaffinity": 203, "sched_setattr": 314, "setpriority": 141,
                "ioprio_set": 251, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execveat": 322,
                "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
                "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
                "socket": 41, "socketpair": 53, "keyctl": 250, "add_key": 248, "request_key": 249,
                "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
                "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
                "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "bpf": 321,
                "perf_event_open": 298, "userfaultfd": 323, "personality": 135,
                # round four: memory the caps do not count (pipes pinning pages) and host-wide state (the page
                # cache, writeback, the machine's AIO table)
                "vmsplice": 278, "splice": 275, "tee": 276, "sync": 162, "syncfs": 306, "sync_file_range": 277,
                "io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209, "io_cancel": 210,
                "io_pgetevents": 333, "fadvise64": 221, "readahead": 187},
               {"execve": 59, "fcntl": 72, "prlimit64": 302, "madvise": 28}),
    "aarch64": (0xC00000B7,
                {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                 "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "ptrace": 117,
                 "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "process_madvise": 440,
                 "migrate_pages": 238, "move_pages": 239, "get_robust_list": 100, "sched_setparam": 118,
                 "sched_setscheduler": 119, "sched_setaffinity": 122, "sched_setattr": 274, "setpriority": 140,
                 "ioprio_set": 30, "clone": 220, "clone3": 435, "execveat": 281, "unshare": 97, "setns": 268,
                 "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429,
                 "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "socket": 198, "socketpair": 199,
                 "keyctl": 219, "add_key": 217, "request_key": 218, "shmget": 194, "shmat": 196, "shmctl": 195,
                 "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191, "semtimedop": 192, "msgget": 186,
                 "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "mq_open": 180, "io_uring_setup": 425,
                 "io_uring_enter": 426, "io_uring_register": 427, "bpf": 280, "perf_event_open": 241,
                 "userfaultfd": 282, "personality": 92,
                 "vmsplice": 75, "splice": 76, "tee": 77, "sync": 81, "syncfs": 267, "sync_file_range": 84,
                 "io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3, "io_getevents": 4,
                 "io_pgetevents": 292, "fadvise64": 223, "readahead": 213},
                {"execve": 221, "fcntl": 25, "prlimit64": 261, "madvise": 233}),
}
# fcntl's commands a program may use: descriptors, flags, locks, reading a pipe's size and seals. Everything else is
# refused: F_SETOWN/F_SETSIG/F_SETOWN_EX (signals to another pid), F_SETPIPE_SZ (a pipe of pinned memory),
# F_SETLEASE (a lease that stalls the next program's open), F_NOTIFY, F_ADD_SEALS.
FCNTL_ALLOWED = (0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 16, 36, 37, 38, 1025, 1030, 1032, 1034)
# madvise's advice values a program's allocator needs: normal, random, sequential, willneed, dontneed, free,
# dontfork/dofork, hugepage/nohugepage, dontdump/dodump, wipeonfork/keeponfork. Refused: KSM merging, cold and
# pageout (the host's reclaim), remove, populate, hwpoison and the rest.
MADVISE_ALLOWED = (0, 1, 2, 3, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19)
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

# The code that runs in the jail: one interpreter per batch of programs (trusted; it reads the batch
# from stdin). It forks one child per program, at most `parallel` at a time. A child puts its own job
# (code and test inputs, never an expected value) on fd 0, its result pipe on fd 3, closes every other
# descriptor, takes the OS limits and — where there is one for this machine — a seccomp filter (0b), and
# then replaces itself with a fresh interpreter that runs RUNNER: the program's process never holds
# ctypes, the harness's globals or another program's code. This interpreter relays each child's bytes to
# its own stdout framed `i n\n` + n bytes, and `i end t\n` when child i has ended (t = 1: out of time).
HARNESS = r"""
import json, marshal, os, resource, select, signal, sys, time
batch = json.loads(sys.stdin.read())
if batch["cwd"]:   # (0) in the jail: its read-only /tmp
    os.chdir(batch["cwd"])
if batch["filter"]:   # (0b) the seccomp filter's parts, here (trusted); each child builds its own and installs it
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    arch, denied, checked, fcntl_allowed, madvise_allowed = batch["filter"]

    def filter_program(exec_path):
        # classic BPF over struct seccomp_data {nr @0, arch @4, ip @8, args[6] @16 (lo, hi)}; jumps to labels
        LOAD, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
        ALLOW, KILL, EPERM = 0x7FFF0000, 0x80000000, 0x00050001
        lo, hi = exec_path & 0xFFFFFFFF, exec_path >> 32
        code = [(LOAD, 4), (JEQ, arch, None, "kill"), (LOAD, 0), (JGE, 0x40000000, "deny", None),
                (JEQ, checked["execve"], "execve", None), (JEQ, checked["fcntl"], "fcntl", None),
                (JEQ, checked["prlimit64"], "prlimit64", None), (JEQ, checked["madvise"], "madvise", None)]
        code += [(JEQ, nr, "deny", None) for nr in denied] + [(RET, ALLOW)]
        # execve only of this child's own path buffer: the fresh interpreter cannot name that address again
        code += ["execve", (LOAD, 16), (JEQ, lo, None, "deny"), (LOAD, 20), (JEQ, hi, "allow", "deny")]
        # fcntl (args[1]) and madvise (args[2]): an allow list each; anything else is refused
        code += ["fcntl", (LOAD, 24)] + [(JEQ, c, "allow", None) for c in fcntl_allowed] + [(RET, EPERM)]
        code += ["madvise", (LOAD, 32)] + [(JEQ, c, "allow", None) for c in madvise_allowed] + [(RET, EPERM)]
        # prlimit64 on its own pid (0) only: no other process's limits are read or changed
        code += ["prlimit64", (LOAD, 16), (JEQ, 0, None, "deny"), (LOAD, 20), (JEQ, 0, "allow", "deny")]
        code += ["allow", (RET, ALLOW), "kill", (RET, KILL), "deny", (RET, EPERM)]   # (BPF jumps only forward)
        where, at = {}, 0
        for c in code:
            if isinstance(c, str):
                where[c] = at
            else:
                at += 1
        out, at = [], 0
        for c in code:
            if isinstance(c, str):
                continue
            op, k, jt, jf = (c + (None, None))[:4]
            jump = lambda label: 0 if label is None else where[label] - at - 1
            out.append(struct.pack("HBBI", op, jump(jt), jump(jf), k))
            at += 1
        return b"".join(out)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    def prctl(option, arg2, arg3=0):
        return libc.prctl(ctypes.c_int(option), *[ctypes.c_ulong(a) for a in (arg2, arg3, 0, 0)])

def isolate(job, result_fd):
    # in the child: (1) fd 0 is its own job, fd 3 its result channel, 1-2 /dev/null, no other descriptor
    # (the other programs' pipes, this interpreter's stdout); (2) OS limits; then (0b) the filter and the
    # fresh interpreter. Never returns.
    own = os.memfd_create("job")   # (written before the file-size limit: it is a file)
    data = marshal.dumps(job["run"])
    while data:
        data = data[os.write(own, data):]
    os.lseek(own, 0, os.SEEK_SET)
    os.dup2(own, 0)
    os.dup2(result_fd, 3)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.closerange(4, 1 << 20)
    L = job["limits"]
    try:   # (2) the OS limits; if any cannot be set, the program does not run (exit code: LAYERS)
        if batch.get("fail") == "limits":
            raise OSError("made to fail")
        resource.setrlimit(resource.RLIMIT_CPU, (L["cpu"], L["cpu"] + 1))   # SIGXCPU at the limit (a time-out), SIGKILL 1 s on
        resource.setrlimit(resource.RLIMIT_AS, (L["mem"], L["mem"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (L["files"], L["files"]))
        # queued signals (a POSIX timer holds one each) count against the grading user's own limit up the chain of
        # user namespaces: a program keeps to a few
        resource.setrlimit(resource.RLIMIT_SIGPENDING, (L["signals"], L["signals"]))
    except BaseException:
        os._exit(91)
    argv = [batch["python"], "-I", "-S", "-c", batch["runner"]]
    if not batch["filter"]:
        os.execv(argv[0], argv)
    path = ctypes.create_string_buffer(argv[0].encode())
    args = (ctypes.c_char_p * (len(argv) + 1))(*[a.encode() for a in argv], None)
    env = (ctypes.c_char_p * 1)(None)
    prog = filter_program(ctypes.addressof(path))
    buf = ctypes.create_string_buffer(prog)
    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    # not dumpable (no ptrace, no /proc of it), no new privileges, the filter: else the program does not run
    fail = batch.get("fail")
    if fail == "dumpable" or prctl(4, 0):        # PR_SET_DUMPABLE
        os._exit(92)
    if fail == "no_new_privs" or prctl(38, 1):   # PR_SET_NO_NEW_PRIVS
        os._exit(93)
    if fail == "filter" or prctl(22, 2, ctypes.addressof(fprog)):   # PR_SET_SECCOMP, the filter
        os._exit(94)
    if fail == "interpreter":
        path = ctypes.create_string_buffer(b"/nonexistent/python")
    libc.execve(path, args, env)
    os._exit(95)                                 # the fresh interpreter did not start

def relay(data):
    while data:
        data = data[os.write(1, data):]

pending, running = [(job["i"], job) for job in batch["jobs"]], {}   # read end -> [i, pid, deadline, bytes, cap]
stuck = []   # children killed that had not died: never waited for (a program asleep in the kernel holds no batch)

def reaped(pid):
    # the child's status once it is dead, waiting at most 0.2 s for the kill to land (never blocking: a child
    # asleep where SIGKILL cannot reach it, a sync on a hung filesystem, is left to the kernel); else None
    for _ in range(40):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.005)
    return None

def ended(r, timed_out):
    i, pid = running.pop(r)[:2]
    os.kill(pid, signal.SIGKILL)   # (an ended child is a zombie until reaped below: the kill cannot miss)
    os.close(r)
    status = reaped(pid)
    if status is None:
        stuck.append(pid)
    # out of CPU seconds (RLIMIT_CPU: SIGXCPU) is out of time too; a child that would not die is reported, and so
    # is a layer that failed to install (its exit code, 91-97: LAYERS)
    timed_out = timed_out or status is None or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU)
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else 0
    note = b" stuck" if status is None else (b" layer%d" % code if 91 <= code <= 97 else b"")
    relay(b"%d end %d%s\n" % (i, timed_out, note))

while pending or running:
    while pending and len(running) < batch["parallel"]:
        i, job = pending.pop(0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: never returns
            try:
                isolate(job, w)
            finally:
                os._exit(99)
        os.close(w)
        running[r] = [i, pid, time.monotonic() + job["wall"], 0, job["result"]]
    wait = max(0.0, min(v[2] for v in running.values()) - time.monotonic())
    for r in select.select(list(running), [], [], wait)[0]:
        data = os.read(r, 65536)
        entry = running[r]
        if data:
            relay(b"%d %d\n" % (entry[0], len(data)) + data)
            entry[3] += len(data)
        if not data or entry[3] > entry[4]:   # its end, or over the size cap (the parent sees it over)
            ended(r, False)
    now = time.monotonic()
    for r in [r for r, v in running.items() if v[2] <= now]:   # out of time
        ended(r, True)
"""

# The program's own interpreter (`python -I -S -c RUNNER`, started under the filter): it reads its one
# job from fd 0, imports the allowed modules the program names, takes its own user (as root without a
# jail: layer 3), installs the audit hook and runs the program. Everything after `sys.addaudithook` is
# reachable by the program, so nothing there is worth having: its own code and inputs. It writes one
# JSON line per test on fd 3 as the test ends, ["ok", value] or ["error", "Type: message"], and ends
# with os._exit: no interpreter shutdown, so nothing runs after the hook.
RUNNER = r"""# sdpo sandbox: one program
import builtins, io, marshal, os, resource, sys, types
try:   # json.dumps and json.loads exactly, from the C halves they use: json's Python half imports re (17 ms a program)
    import _json
    def json_dumps(v):
        def default(o):
            raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
        return "".join(_json.make_encoder({}, default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)(v, 0))
    class Context:   # what json.JSONDecoder gives its scanner
        strict, object_hook, object_pairs_hook, parse_float, parse_int, memo = True, None, None, float, int, {}
        parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__
    scan = _json.make_scanner(Context())
    def json_loads(text):
        return scan(text, 0)[0]
    assert json_loads(json_dumps([1, 2.5, "é\n", None, True, {"a": [float("inf")]}])) == [1, 2.5, "é\n", None, True, {"a": [float("inf")]}]
except Exception:   # (another Python's C half): json itself
    import json
    json_dumps, json_loads = json.dumps, json.loads
chunks = []
while True:
    chunk = os.read(0, 1 << 20)
    if not chunk:
        break
    chunks.append(chunk)
job = marshal.loads(b"".join(chunks))
os.dup2(1, 0)   # (fd 1 is /dev/null)
for name in job["preload"]:   # the allowed modules this program names (the audit hook refuses any later load)
    try:
        __import__(name)
    except ImportError:   # (not in this Python: the program's import of it fails, as it should)
        continue
if job["uid"] is not None:   # (3) a user of its own, allowed one process: this one; else the program does not run
    try:
        if job.get("fail") == "user":
            raise OSError("made to fail")
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
        os.setgroups([])
        os.setgid(job["uid"])
        os.setuid(job["uid"])
    except BaseException:
        os._exit(96)

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

def run_program(job):
    L, channel = job["limits"], 3
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
    typing = sys.modules.get("typing")
    prelude = {name: getattr(typing, name) for name in job["typing"] if hasattr(typing, name)}

    def send(outcome):
        os.write(channel, (json_dumps(outcome) + "\n").encode())

    def tagged(v):
        # a value as plain JSON; sets, dicts with keys other than strings, fractions, decimals and dates tagged,
        # for the grader to rebuild
        kind = (type(v).__module__, type(v).__name__)
        if kind == ("fractions", "Fraction"):
            return {"$fraction": [v.numerator, v.denominator]}
        if kind == ("decimal", "Decimal"):
            return {"$decimal": str(v)}
        if kind in (("datetime", "date"), ("datetime", "datetime")):
            return {"$date": v.isoformat()}
        if kind == ("collections", "deque"):
            return [tagged(x) for x in v]
        if isinstance(v, (set, frozenset)):
            return {"$set": [tagged(x) for x in v]}
        if isinstance(v, dict):
            if all(type(k) is str for k in v) and "$set" not in v and "$dict" not in v:
                return {k: tagged(x) for k, x in v.items()}
            return {"$dict": [[tagged(k), tagged(x)] for k, x in v.items()]}
        if isinstance(v, (list, tuple)):
            return [tagged(x) for x in v]
        return v

    def unsent(v):
        # an argument as the grader sent it, rebuilt: tuples, sets, dicts with keys other than strings, fractions
        if isinstance(v, list):
            return [unsent(x) for x in v]
        if isinstance(v, dict):
            tag = next(iter(v), None) if len(v) == 1 else None
            if tag == "$tuple":
                return tuple(unsent(x) for x in v[tag])
            if tag == "$set":
                return {unsent(x) for x in v[tag]}
            if tag == "$dict":
                return {unsent(k): unsent(x) for k, x in v[tag]}
            if tag == "$fraction":
                return sys.modules["fractions"].Fraction(*v[tag])
            if tag == "$decimal":
                return sys.modules["decimal"].Decimal(v[tag])
            return {k: unsent(x) for k, x in v.items()}
        return v

    def failure(e):
        try:
            return ["error", (type(e).__name__ + ": " + str(e))[:250]]
        except BaseException:
            return ["error", "an exception"]

    def the_function(ns, name):
        # the test's function: by name; else a LeetCode-style Solution().name; else the first function defined
        if callable(ns.get(name)):
            return ns[name]
        if job["fallbacks"] is not None:   # the release's lookup: the first top-level def, then its text rule
            found = [ns[n] for n in job["fallbacks"] if callable(ns.get(n))]
            if not found:
                raise NameError(f"name '{name}' is not defined")
            return found[0]
        if isinstance(ns.get("Solution"), type) and callable(getattr(ns["Solution"], name, None)):
            return getattr(ns["Solution"](), name)
        return next(v for v in ns.values() if isinstance(v, types.FunctionType) and v.__code__.co_filename == "<program>")

    try:   # (4) the audit hook; if it cannot be installed, the program does not run
        if job.get("fail") == "hook":
            raise RuntimeError("made to fail")
        sys.addaudithook(hook)
    except BaseException:
        os._exit(97)
    try:
        compiled = compile(code, "<program>", "exec")
        if job["mode"] == "code":   # assert-style tests: the grader sends its entry point's calls, as values
            sys.stdin, sys.stdout = io.StringIO(""), Capped()
            ns = {"__name__": "__main__", "__builtins__": program_builtins, **prelude}
            exec(compiled, ns)
            for calls in job["inputs"]:
                try:
                    out = []
                    for solution, args, kwargs in calls:
                        fn = getattr(ns["Solution"](), job["entry"]) if solution else ns[job["entry"]]
                        out.append(tagged(fn(*unsent(args), **unsent(kwargs))))
                    send(["ok", out])
                except BaseException as e:
                    send(failure(e))
        elif job["fn_name"]:   # functional tests: run the program once, call the function on every input
            sys.stdin, sys.stdout = io.StringIO(""), Capped()
            ns = {"__name__": "__main__", "__builtins__": program_builtins, **prelude}
            exec(compiled, ns)
            fn = the_function(ns, job["fn_name"])
            for kind, args in job["inputs"]:
                try:
                    send(["ok", json_loads(json_dumps(fn(**args) if kind == "kwargs" else fn(*args)))])
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

run_program(job)
os._exit(0)
"""


# ---- layer 0: the OS jail ----
class NoJail(RuntimeError):
    """CODING asked for, but this machine gives no jail and --unsafe-code was not given."""


NO_JAIL = ("no OS jail for CODING programs on this machine: install bubblewrap (Debian/Ubuntu: apt install "
           "bubblewrap) or enable user namespaces for util-linux's unshare; or pass --unsafe-code to run them "
           "with the inner layers only (docs/RELIABILITY.md says what that leaves open)")

# The unshare jail, run by /bin/sh as the PID namespace's init: a tmpfs root holding read-only binds of the
# system directories (and links such as /bin -> usr/bin), /dev/null, a private /tmp; then chroot into it
# and drop every capability (and, as root, the uid) before the interpreter starts. When the program
# ends, sh ends, and the kernel kills whatever else is left in the namespace.
JAIL_SH = r"""
set -e
PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$1; uid=$2; shift 2
mount -t tmpfs -o size=1m,mode=755 jail "$root"
while [ "$1" != -- ]; do
  case $1 in
    *=*) ln -s "${1#*=}" "$root${1%%=*}" ;;
    !*) mount -t tmpfs -o ro,size=4k,mode=555 mask "$root${1#!}" ;;
    *) mkdir -p "$root$1"; mount --bind "$1" "$root$1"; mount -o remount,bind,ro "$root$1" ;;
  esac
  shift
done
shift
mkdir -p "$root/dev" "$root/tmp"; touch "$root/dev/null"; mount --bind /dev/null "$root/dev/null"
mount -o remount,bind,ro "$root"
if [ "$uid" = - ]; then who=""; else who="--reuid=$uid --regid=$uid --clear-groups"; fi
chroot "$root" /usr/bin/setpriv $who --inh-caps=-all --bounding-set=-all --no-new-privs -- /usr/bin/env -i "$@"
"""


def interpreter():
    return os.path.realpath(sys.executable)


# Parts of /usr a program never needs and a machine may keep a checkout or task data in (Docker's WORKDIR
# /usr/src/app, /usr/local, /usr/share): each is hidden under an empty read-only mount, unless the interpreter's
# own tree lies inside it (a Python in /usr/local: then /usr/local stays, and the others are still hidden).
MASKED = ("/usr/src", "/usr/local", "/usr/share")


def masked_dirs():
    """The MASKED directories this machine has that hold no part of the interpreter's tree."""
    mine = (os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(interpreter())))
    return [m for m in MASKED if os.path.isdir(m) and not os.path.islink(m)
            and not any(d == m or d.startswith(m + "/") for d in mine)]


def system_view():
    """What a jail shows, read-only: [directories], [(link, target)] — /usr, the interpreter's own tree
    (its standard library) and the top-level /bin, /lib, ... (links into /usr on a merged-/usr system).
    masked_dirs() are then hidden under empty mounts."""
    dirs, links = ["/usr"], []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            links.append((top, os.readlink(top)))
        elif os.path.isdir(top):
            dirs.append(top)
    for d in (os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(interpreter()))):
        if not any(d == x or d.startswith(x + "/") for x in dirs):
            dirs.append(d)
    return dirs, links


def jail_argv(kind, root_dir):
    """The command line that runs the rest of it in a jail of this kind (root_dir: an empty directory the
    unshare jail mounts its root on)."""
    dirs, links = system_view()
    as_root = os.geteuid() == 0
    if kind == "bwrap":
        # as root, bubblewrap itself runs as uid 61000 (setpriv): run by root it would map the jail's user
        # to root outside
        argv = ["setpriv", f"--reuid={UID_BASE}", f"--regid={UID_BASE}", "--clear-groups", "--"] if as_root else []
        argv += ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(UID_BASE), "--gid", str(UID_BASE),
                 "--die-with-parent", "--new-session", "--hostname", "jail", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
                 "--cap-drop", "ALL"]
        for d in dirs:
            argv += ["--ro-bind", d, d]
        for link, target in links:
            argv += ["--symlink", target, link]
        for m in masked_dirs():
            argv += ["--tmpfs", m, "--remount-ro", m]
        # nothing writable: /dev holds /dev/null alone, /tmp is a directory of the read-only root
        return argv + ["--dev-bind", "/dev/null", "/dev/null", "--dir", "/tmp", "--remount-ro", "/", "--chdir", "/tmp", "--"]
    if kind == "subuid":   # already in a user namespace of its own (spawn): its root is this user, 61000 a subordinate uid
        return ["unshare", "--mount", "--propagation", "private", "--net", "--pid", "--fork", "--kill-child",
                "--ipc", "--uts", "/bin/sh", "-c", JAIL_SH, "jail", root_dir, str(UID_BASE),
                *dirs, *[f"{link}={target}" for link, target in links], *[f"!{m}" for m in masked_dirs()], "--"]
    if kind == "unshare":
        user = [] if as_root else ["--user", "--map-root-user"]
        return ["unshare", *user, "--mount", "--propagation", "private", "--net", "--pid", "--fork", "--kill-child",
                "--ipc", "--uts", "/bin/sh", "-c", JAIL_SH, "jail", root_dir, str(UID_BASE) if as_root else "-",
                *dirs, *[f"{link}={target}" for link, target in links], *[f"!{m}" for m in masked_dirs()], "--"]
    raise ValueError(f"unknown jail '{kind}'")


def subordinate_ids():
    """(first subordinate uid, first subordinate gid) of this user from /etc/subuid and /etc/subgid, where
    newuidmap and newgidmap are installed and the user is not root; else None (the jail then runs as this user)."""
    if os.geteuid() == 0 or not (shutil.which("newuidmap") and shutil.which("newgidmap")):
        return None
    me = {pwd.getpwuid(os.getuid()).pw_name, str(os.getuid())}
    found = []
    for path in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError, ValueError):
            for line in open(path):
                name, first, count = line.strip().split(":")
                if name in me and int(count) >= 1:
                    found.append(int(first))
                    break
    return tuple(found) if len(found) == 2 else None


def spawn_jail(kind, argv, **popen_args):
    """subprocess.Popen of a jail's command line. The kind "subuid" first enters a user namespace of its own in the
    child, before it runs anything: its root is this user (to build the jail: mounts, chroot), and the jail's user
    61000 is this user's first subordinate uid, a uid that owns nothing. The maps are written from here by the
    setuid helpers newuidmap and newgidmap, while the child waits; if they fail, the child never runs the command."""
    if kind != "subuid":
        return subprocess.Popen(argv, **popen_args)
    ids, before = subordinate_ids(), popen_args.pop("preexec_fn", None)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def enter_namespace():   # in the child (one thread): a new user namespace, then wait for its maps
        os.close(ready_r)
        os.close(go_w)
        if before:
            before()
        if ids is None or ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:   # CLONE_NEWUSER
            os._exit(125)
        os.write(ready_w, str(os.getpid()).encode())
        os.close(ready_w)
        if os.read(go_r, 1) != b"1":
            os._exit(125)

    def write_maps():   # here, while the child waits
        ok = False
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            pid = os.read(ready_r, 32).decode()
            if pid:
                uid, gid = str(os.getuid()), str(os.getgid())
                ok = all(subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0 for cmd in (
                    ["newuidmap", pid, "0", uid, "1", str(UID_BASE), str(ids[0]), "1"],
                    ["newgidmap", pid, "0", gid, "1", str(UID_BASE), str(ids[1]), "1"]))
        with contextlib.suppress(OSError):
            os.write(go_w, b"1" if ok else b"0")
    mapper = threading.Thread(target=write_maps, daemon=True)
    mapper.start()
    try:
        proc = subprocess.Popen(argv, preexec_fn=enter_namespace, pass_fds=(), **popen_args)
    finally:
        os.close(ready_w)
        os.close(go_r)
        mapper.join(timeout=15)
        os.close(ready_r)
        os.close(go_w)
    return proc


@functools.lru_cache(maxsize=None)
def first_working_jail(kinds):
    """The first kind of jail that runs a program here (tried once per process), or None."""
    for kind in kinds:
        if not shutil.which("unshare" if kind == "subuid" else kind) or (kind == "subuid" and not subordinate_ids()):
            continue
        why = "it did not answer"
        with tempfile.TemporaryDirectory(prefix="jail-probe-") as d:
            try:
                probe = spawn_jail(kind, jail_argv(kind, d) + [interpreter(), "-I", "-S", "-c", "print(6 * 7)"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={"PATH": "/usr/bin:/bin"})
                try:
                    out, err = probe.communicate(timeout=30)
                finally:
                    probe.kill()
                    probe.wait()
                if out.strip() == "42":
                    return kind
                why = (err.strip().splitlines() or [f"exit {probe.returncode}"])[-1][:200]
            except (OSError, subprocess.SubprocessError) as e:
                why = str(e)[:200]
        if kind != kinds[-1]:   # a preferred kind, available here, that failed: say so once, with its reason
            print(f"warning: the {kind} jail failed its probe here ({why}); trying the next kind", file=sys.stderr)
    return None


def jail():
    """This machine's jail for CODING programs: 'subuid', 'bwrap', 'unshare' or None (JAILS in order; as root,
    unshare first: its jail's user is uid 61000 outside too; as a normal user with subordinate uids and
    newuidmap, subuid: its jail's user is the first subordinate uid outside, which owns nothing)."""
    kinds = JAILS
    if os.geteuid() == 0 and "unshare" in kinds:
        kinds = ("unshare",) + tuple(k for k in kinds if k != "unshare")
    return first_working_jail(kinds)


def check_jail(allow_unjailed=None):
    """Raise NoJail unless programs can run jailed here (or --unsafe-code allows running them without: allow_unjailed,
    by default this process's ALLOW_UNJAILED)."""
    if not (ALLOW_UNJAILED if allow_unjailed is None else allow_unjailed) and jail() is None:
        raise NoJail(NO_JAIL)


def parse_tests(tests):
    """{'fn_name', 'inputs', 'outputs', ...} from a record's tests (JSON text or a dict); None if unusable."""
    try:
        t = json.loads(tests) if isinstance(tests, str) else tests
        if not isinstance(t, dict) or not isinstance(t.get("inputs"), list) or not isinstance(t.get("outputs"), list):
            return None
        if not t["inputs"] or len(t["inputs"]) != len(t["outputs"]):
            return None
        if t.get("testtype") == "code":   # assert-style: each test parsed here into its checks and calls
            entry = t.get("fn_name") or entry_point(t["inputs"])
            parsed = [parse_asserts(test, entry) for test in t["inputs"]]
            if entry is None or any(p is None for p in parsed):
                return None
            t = {**t, "asserts": parsed, "entry": entry}
        return t
    except (ValueError, TypeError, RecursionError):
        return None


# ---- assert-style tests (the release's 'code' test type) ----
# The program never runs a test's code, and it answers only calls of the task's *entry point*: the function the
# record names, else the one function every assert calls, f(...) or a LeetCode-style Solution().m(...). Each
# assert is parsed here, and every other part of it is evaluated here by the real object: literals, comparisons,
# and/or/not, arithmetic on numbers, subscripts, a fixed list of pure built-ins (len, sorted, abs, isinstance, …),
# of checkers and constructors (math's pure functions, or a bare isclose as the program imported it; Fraction,
# Decimal, Counter, OrderedDict, date, datetime, timedelta; numpy's isclose, allclose and array_equal) and of pure
# methods and attributes of plain values (f(x).startswith(...), f(x).real). The entry point's arguments are
# evaluated here too and sent as values. So `assert isclose(f(-3), 0)` sends the program "f" and [-3], and
# decides isclose here: a program that defines its own isclose changes nothing. A test with any other part (a
# second function of the program, a class it defines such as TreeNode, a bare name) would need the program to
# evaluate it, and the program would then decide the check: such a test is unusable (counted and reported when
# the data loads). No expected value and no check's source ever reaches the program's process.
def bounded_range(*args):
    r = range(*args)
    if len(r) > 10**6:
        raise ValueError("range too long to evaluate here")
    return r


MAX_SAME_HASH = 64   # distinct items of one set or dict that may share a hash (Python compares each with all)


def collision_checked(items):
    """items (a list), unless more than MAX_SAME_HASH distinct ones share a hash: building a set of n
    such items costs n² comparisons (colliding integers, 790 KB of them: 20 s; the 1 MB cap: minutes)."""
    seen = {}
    for x in items:
        same = seen.setdefault(hash(x), [])
        if not any(y == x for y in same):
            if len(same) >= MAX_SAME_HASH:
                raise ValueError("a set or dict whose items share their hash")
            same.append(x)
    return items


def safe_set(items=()):
    return frozenset(collision_checked([hashable(x) for x in items]))


# Numbers a check may build, bounded like Python's own int-from-text limit (sys.int_max_str_digits = 4300): a
# Decimal or a Fraction whose exponent is larger would make int(), round(), math.floor() or Fraction() compute a
# number of millions of digits here (Decimal("1e999999999"): hours and gigabytes).
MAX_DIGITS = 4300
MAX_INT = 10 ** MAX_DIGITS   # (computed once: 42,000 sent Fractions once cost 2 s computing it afresh)
DECIMAL_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def bounded_decimal(d):
    """d, unless it is finite with an exponent beyond ±MAX_DIGITS (ValueError: the check fails)."""
    if d.is_finite() and abs(d.adjusted()) > MAX_DIGITS:
        raise ValueError("a Decimal too large to judge")
    return d


def safe_decimal(*args, **kwargs):
    return bounded_decimal(decimal.Decimal(*args, **kwargs))


def safe_fraction(*args, **kwargs):
    """Fraction(...), refusing a text or a number whose exponent or digits exceed MAX_DIGITS."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, str):
            m = DECIMAL_TEXT.fullmatch(a)
            if len(a) > MAX_DIGITS or (m and m.group(2) and abs(int(m.group(2)[1:])) > MAX_DIGITS):
                raise ValueError("a Fraction's text too large to judge")
        if isinstance(a, decimal.Decimal):
            bounded_decimal(a)
    return fractions.Fraction(*args, **kwargs)


def safe_counter(*args, **kwargs):
    """Counter(...), its items collision-checked first as a set's are (Counter is a dict)."""
    if args and not isinstance(args[0], (str, bytes)):
        items = list(args[0].keys() if isinstance(args[0], dict) else args[0])
        collision_checked(items)
        args = (args[0] if isinstance(args[0], dict) else items,) + args[1:]
    return collections.Counter(*args, **kwargs)


def safe_ordered_dict(*args, **kwargs):
    """OrderedDict(...), its keys collision-checked first."""
    if args:
        pairs = list(args[0].items() if isinstance(args[0], dict) else args[0])
        collision_checked([p[0] for p in pairs])
        args = (pairs,) + args[1:]
    return collections.OrderedDict(*args, **kwargs)


TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict, "tuple": (list, tuple),
         "set": (set, frozenset)}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: contains(b, a),
           ast.NotIn: lambda a, b: not contains(b, a), ast.Is: operator.is_, ast.IsNot: operator.is_not}
NUMBERS_ONLY = {ast.Mult: operator.mul, ast.Mod: operator.mod, ast.Div: operator.truediv,
                ast.FloorDiv: operator.floordiv, ast.Sub: operator.sub}


def contains(container, item):
    """`item in container` on the grader's values (a set's or dict's items are hashable: lists as tuples)."""
    return (hashable(item) if isinstance(container, (frozenset, dict)) else item) in container


def is_type_name(node):
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    return all(isinstance(e, ast.Name) and e.id in TYPES for e in elts)


PURE = {"abs": abs, "len": len, "sorted": sorted, "set": safe_set, "frozenset": safe_set,
        "list": list, "tuple": tuple, "round": round, "min": min, "max": max, "sum": sum, "float": float, "int": int,
        "str": str, "bool": bool, "any": any, "all": all, "range": bounded_range}
MATH_PURE = {name: getattr(math, name) for name in ("isclose", "floor", "ceil", "trunc", "sqrt", "fabs", "isnan",
                                                     "isinf", "isfinite", "log", "log2", "log10", "exp", "hypot")}
MATH_CONSTANTS = {name: getattr(math, name) for name in ("pi", "e", "tau", "inf", "nan")}
# Checkers and constructors a test may call by a bare name (the program imported them, `from math import isclose`)
# or through their module, evaluated here by the real object whatever the program binds to the name
CHECKERS = {"isclose": math.isclose, "Fraction": safe_fraction, "Decimal": safe_decimal,
            "Counter": safe_counter, "OrderedDict": safe_ordered_dict, "date": datetime.date,
            "datetime": datetime.datetime, "timedelta": datetime.timedelta}
MODULE_FUNCTIONS = {"math": MATH_PURE, "fractions": {"Fraction": safe_fraction},
                    "decimal": {"Decimal": safe_decimal},
                    "collections": {"Counter": safe_counter, "OrderedDict": safe_ordered_dict},
                    "datetime": {n: CHECKERS[n] for n in ("date", "datetime", "timedelta")}}
if numpy is not None:   # (numpy comes with torch; a test's np.isclose(f(x), y) is decided here, on plain values)
    MODULE_FUNCTIONS["np"] = MODULE_FUNCTIONS["numpy"] = {n: getattr(numpy, n) for n in ("isclose", "allclose", "array_equal")}
# Pure methods and attributes of plain values (a returned string, list, dict or number), evaluated here
METHODS = {str: ("startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "split", "count", "find",
                 "index", "isdigit", "isalpha", "isalnum", "islower", "isupper", "isspace"),
           list: ("count", "index"), tuple: ("count", "index"), dict: ("keys", "values", "items", "get")}
METHOD_NAMES = frozenset(m for names in METHODS.values() for m in names)
ATTRIBUTES = ("real", "imag", "numerator", "denominator")


class Unusable(ValueError):
    """An assert with a part that only the program could evaluate and that is not a call of its entry point."""


def solution_method(func):
    """m of a Solution().m(...) call's func, else None."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and not func.value.args and \
            not func.value.keywords and isinstance(func.value.func, ast.Name) and func.value.func.id == "Solution":
        return func.attr
    return None


def callee(node):
    """The program function a call node names (f(...) or Solution().m(...)) when it is not the grader's own
    (a built-in, a checker, a module's function or a value's method): None otherwise."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        name = node.func.id
        if name == "Solution" and not node.args and not node.keywords:   # (the Solution() of Solution().m(...))
            return None
        return None if name in PURE or name in CHECKERS or name == "isinstance" else name
    return solution_method(node.func)


def entry_point(tests):
    """The entry point of a record's assert-style tests: the one function (f, or Solution().m) they all call; None
    when they call none or more than one (the record is then unusable)."""
    names = set()
    for test in tests:
        try:
            names |= {callee(n) for n in ast.walk(ast.parse(test))} - {None}
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            return None
    return names.pop() if len(names) == 1 else None


def grader_parts(node):
    """The sub-expressions of a node this process evaluates (judged), or None when it cannot evaluate it."""
    if isinstance(node, ast.Constant):
        return []
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return node.elts
    if isinstance(node, ast.Dict) and None not in node.keys:
        return node.keys + node.values
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        return [node.operand]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, *NUMBERS_ONLY)):
        return [node.left, node.right]
    if isinstance(node, ast.BoolOp):
        return node.values
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Subscript):
        s = node.slice
        return [node.value] + ([p for p in (s.lower, s.upper, s.step) if p is not None] if isinstance(s, ast.Slice) else [s])
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in MATH_CONSTANTS:
            return []
        return [node.value] if node.attr in ATTRIBUTES else None
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args) or \
            any(k.arg is None for k in node.keywords):
        return None
    args, func = node.args + [k.value for k in node.keywords], node.func
    if isinstance(func, ast.Name):
        if func.id in PURE and not node.keywords:
            return node.args
        if func.id == "isinstance" and not node.keywords and len(node.args) == 2 and is_type_name(node.args[1]):
            return node.args[:1]
        return args if func.id in CHECKERS else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in MODULE_FUNCTIONS:
        return args if func.attr in MODULE_FUNCTIONS[func.value.id] else None
    if isinstance(func, ast.Attribute) and func.attr in METHOD_NAMES and not solution_method(func):
        return [func.value] + args
    return None


def split_calls(node, calls, entry):
    """Walk one assert's expression: every call of the entry point is appended to calls (the program evaluates
    those, on arguments evaluated here); every other part is kept for this process, or makes the test Unusable
    (a call of any other function of the program among them; with entry None, any call of the program)."""
    name = callee(node)
    if name is not None and name != entry:
        raise Unusable(ast.unparse(node))
    if name is not None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise Unusable(ast.unparse(node))
        if not no_calls(node.args + [k.value for k in node.keywords]):
            raise Unusable(ast.unparse(node))
        args, kwargs = [argument(a) for a in node.args], {k.arg: argument(k.value) for k in node.keywords}
        calls.append((node, sent(args), sent(kwargs)))   # (values, checked to be sendable, here at load)
        return
    kids = grader_parts(node)
    if kids is None:
        raise Unusable(ast.unparse(node))
    for kid in kids:
        split_calls(kid, calls, entry)


def argument(node):
    """An argument's value, evaluated here: as judged, with the tuples of its literal kept tuples (the function may
    tell them from lists; a comparison here never does)."""
    if isinstance(node, ast.Tuple):
        return tuple(argument(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [argument(e) for e in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return safe_dict((argument(k), argument(v)) for k, v in zip(node.keys, node.values))
    return judged(node, {})


def no_calls(nodes):
    """Whether these argument expressions are this process's alone (a call of the program inside: Unusable)."""
    inner = []
    for n in nodes:
        split_calls(n, inner, None)
    return not inner


def parse_asserts(test, entry=None):
    """One assert-style test (source text: one or more `assert` lines) -> [(expression, [(call node, its argument
    values, its keyword values)])], or None if it is anything but asserts, or a part of it only the program could
    evaluate. entry: the entry point (entry_point); None: this test's own."""
    if not isinstance(test, str):
        return None
    entry = entry or entry_point([test])
    try:
        body = ast.parse(test).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not body or not all(isinstance(stmt, ast.Assert) for stmt in body) or entry is None:
        return None
    out = []
    for stmt in body:
        calls = []
        try:
            split_calls(stmt.test, calls, entry)
        except (Unusable, RecursionError, ArithmeticError, ValueError, TypeError, KeyError, IndexError,
                AttributeError, OverflowError, MemoryError, decimal.DecimalException):
            return None
        out.append((stmt.test, calls))
    return out


def sent(v):
    """An argument value as the program receives it: JSON, with tuples, sets, dicts whose keys are not strings,
    Fractions, Decimals and dates tagged (the program's runner rebuilds them)."""
    if isinstance(v, list):
        return [sent(x) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [sent(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"$set": [sent(x) for x in v]}
    if isinstance(v, dict):
        if all(type(k) is str for k in v) and not any(k.startswith("$") for k in v):
            return {k: sent(x) for k, x in v.items()}
        return {"$dict": [[sent(k), sent(x)] for k, x in v.items()]}
    if isinstance(v, fractions.Fraction):
        return {"$fraction": [v.numerator, v.denominator]}
    if isinstance(v, decimal.Decimal):
        return {"$decimal": str(v)}
    if isinstance(v, (datetime.date, datetime.timedelta)):
        raise Unusable("a date as an argument")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise Unusable(f"an argument of type {type(v).__name__}")


def call_sources(asserts):
    """The program's part of one test: each call of its entry point, as [Solution().m?, its argument values,
    its keyword values] (values, never source)."""
    return [[solution_method(node.func) is not None, args, kwargs] for _, calls in asserts for node, args, kwargs in calls]


DICT = object()   # marks a dict's hashable form, (DICT, frozenset of its items): no value a program sends is it


def hashable(v):
    """A value as a set item or a dict key, built once (linear in its size, however deep it nests): lists and
    tuples as tuples, sets as frozensets (a frozenset is already one: safe_set built it, its items hashable),
    dicts as (DICT, frozenset of (key, value)), with no sorting."""
    if isinstance(v, (list, tuple)):
        return tuple(hashable(x) for x in v)
    if isinstance(v, frozenset):
        return v
    if isinstance(v, set):
        return safe_set(v)
    if isinstance(v, dict):
        return DICT, frozenset(collision_checked([(hashable(k), hashable(x)) for k, x in v.items()]))
    return v


def plain(v):
    """A value as the grader compares it: tuples as lists (JSON has no tuples), sets of hashable items."""
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return safe_set(v)
    if isinstance(v, dict):
        return safe_dict((k, plain(x)) for k, x in v.items())
    return v


def safe_dict(pairs):
    pairs = [(hashable(k), v) for k, v in pairs]
    collision_checked([k for k, _ in pairs])
    return dict(pairs)


def untagged(v):
    """A value the program sent (JSON, sets and odd dicts tagged by the harness) as a Python value."""
    if isinstance(v, dict):
        if set(v) == {"$set"} and isinstance(v["$set"], list):
            return safe_set(untagged(x) for x in v["$set"])
        if set(v) == {"$dict"} and isinstance(v["$dict"], list):
            return safe_dict((untagged(p[0]), untagged(p[1])) for p in v["$dict"] if isinstance(p, list) and len(p) == 2)
        if set(v) == {"$fraction"} and isinstance(v["$fraction"], list) and len(v["$fraction"]) == 2 and \
                all(type(x) is int and abs(x) < MAX_INT for x in v["$fraction"]):
            return fractions.Fraction(*v["$fraction"])
        if set(v) == {"$decimal"} and isinstance(v["$decimal"], str) and len(v["$decimal"]) <= 1000:
            return safe_decimal(v["$decimal"])
        if set(v) == {"$date"} and isinstance(v["$date"], str) and len(v["$date"]) <= 40:
            return (datetime.datetime if "T" in v["$date"] else datetime.date).fromisoformat(v["$date"])
        return {k: untagged(x) for k, x in v.items()}
    if isinstance(v, list):
        return [untagged(x) for x in v]
    return v


JUDGE_SECONDS = 2.0            # judging one program's outcomes, all its tests together (a clock in the judge)
JUDGE_DEADLINE = [math.inf]    # the monotonic time judging the current program must end by (judged_outcomes)


def judged(node, values):
    """Evaluate an assert's expression here (grader_parts says which nodes); values: {id(call node): the value
    the program returned for that call of its entry point}. Past the judging deadline: TimeoutError."""
    if time.monotonic() > JUDGE_DEADLINE[0]:
        raise TimeoutError("judging this program took too long")
    if id(node) in values:
        return values[id(node)]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [judged(e, values) for e in node.elts]
    if isinstance(node, ast.Set):
        return safe_set(judged(e, values) for e in node.elts)
    if isinstance(node, ast.Dict):
        return safe_dict((judged(k, values), judged(v, values)) for k, v in zip(node.keys, node.values))
    if isinstance(node, ast.Attribute):   # math.pi, math.inf, …; a number's real, imag, numerator, denominator
        if isinstance(node.value, ast.Name) and node.value.id == "math":
            return MATH_CONSTANTS[node.attr]
        x = judged(node.value, values)
        if not isinstance(x, (int, float, complex, fractions.Fraction)):
            raise TypeError(f"no attribute {node.attr} here")
        return getattr(x, node.attr)
    if isinstance(node, ast.Subscript):
        x = judged(node.value, values)
        s = node.slice
        key = slice(*(None if p is None else judged(p, values) for p in (s.lower, s.upper, s.step))) \
            if isinstance(s, ast.Slice) else judged(s, values)
        if not isinstance(x, (list, str, dict)):
            raise TypeError("subscript of a non-container")
        return x[hashable(key)] if isinstance(x, dict) else x[key]
    if isinstance(node, ast.UnaryOp):
        x = judged(node.operand, values)
        return not x if isinstance(node.op, ast.Not) else (-x if isinstance(node.op, ast.USub) else +x)
    if isinstance(node, ast.BinOp):
        a, b = judged(node.left, values), judged(node.right, values)
        if isinstance(node.op, ast.Add):
            return a + b
        if not all(isinstance(x, (int, float, fractions.Fraction, decimal.Decimal)) for x in (a, b)):   # no "x" * 10**9
            raise TypeError("numbers only")
        return NUMBERS_ONLY[type(node.op)](a, b)
    if isinstance(node, ast.BoolOp):
        result = isinstance(node.op, ast.And)
        for v in node.values:
            result = judged(v, values)
            if bool(result) != isinstance(node.op, ast.And):
                return result
        return result
    if isinstance(node, ast.Compare):
        left = judged(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = judged(right_node, values)
            if not COMPARE[type(op)](*((left, right) if isinstance(op, (ast.Is, ast.IsNot)) else (plain(left), plain(right)))):
                return False
            left = right
        return True
    func = node.func
    if isinstance(func, ast.Name) and func.id == "isinstance":
        elts = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        x = judged(node.args[0], values)
        return any(isinstance(x, TYPES[e.id]) for e in elts)
    args = [judged(a, values) for a in node.args]
    kwargs = {k.arg: judged(k.value, values) for k in node.keywords}
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in MODULE_FUNCTIONS:
        return MODULE_FUNCTIONS[func.value.id][func.attr](*args, **kwargs)   # math.isclose, np.allclose, …
    if isinstance(func, ast.Attribute):   # a pure method of a plain value: f(x).startswith("a"), d.get(k)
        x = judged(func.value, values)
        if func.attr not in METHODS.get(type(x), ()):
            raise TypeError(f"no method {func.attr} here")
        return getattr(x, func.attr)(*args, **kwargs)
    if func.id in CHECKERS:
        return CHECKERS[func.id](*args, **kwargs)
    return PURE[func.id](*args)


def asserts_hold(asserts, returned):
    """Whether every assert of a test holds, given the values the program returned for its calls."""
    calls = [node for _, cs in asserts for node, _, _ in cs]
    if not isinstance(returned, list) or len(returned) != len(calls):
        return False
    try:
        values = {id(call): untagged(v) for call, v in zip(calls, returned)}
        return all(bool(judged(expr, values)) is True for expr, _ in asserts)
    except Exception:   # a value of the wrong type for the check: the assert fails, as it would have
        return False


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


def passed_test(outcome, tests, k):
    """Whether a program's outcome for test k passes it: its value against the expected one, compared here."""
    if not (isinstance(outcome, list) and len(outcome) == 2 and outcome[0] == "ok"):
        return False
    if tests.get("testtype") == "code":   # assert-style tests: the asserts hold on the values returned
        return "asserts" in tests and asserts_hold(tests["asserts"][k], outcome[1])
    expected = tests["outputs"][k]
    if tests.get("fn_name"):
        return same_value(outcome[1], expected_value(tests, expected))
    return isinstance(outcome[1], str) and same_output(outcome[1], expected)


class Outcomes(list):
    """A program's outcomes (one entry per test, as outcomes_of reads them) with `passed`: each test's verdict,
    judged once (the grade and the feedback both read it)."""
    passed = ()


def judged_outcomes(outcomes, tests, seconds=None):
    """Outcomes with each test judged once, all of them within `seconds` (JUDGE_SECONDS): a test judged past the
    deadline, or not reached by then, fails; the program scores 0 and its siblings keep their grades."""
    JUDGE_DEADLINE[0] = time.monotonic() + (JUDGE_SECONDS if seconds is None else seconds)
    try:
        passed = []
        for k, out in enumerate(outcomes):
            try:
                passed.append(time.monotonic() <= JUDGE_DEADLINE[0] and passed_test(out, tests, k))
            except Exception:   # (a check that raised, TimeoutError included: the test fails)
                passed.append(False)
    finally:
        JUDGE_DEADLINE[0] = math.inf
    out = Outcomes(outcomes)
    out.passed = passed
    return out


def passes(outputs, tests):
    """Whether a program's claimed outputs (a list of ["ok", value] / ["error", why]) pass every test."""
    if not isinstance(outputs, list) or len(outputs) != len(tests["outputs"]):
        return False
    return all(judged_outcomes(outputs, tests).passed)


def limits_for(tests, limits):
    """A test file's own time limit (LiveCodeBench: 6 s) bounds the program, plus a second to start."""
    tl = tests.get("time_limit")
    if isinstance(tl, (int, float)) and not isinstance(tl, bool) and 0 < tl <= 60:
        return {**limits, "wall": max(limits["wall"], tl + 1.0), "cpu": max(limits["cpu"], int(tl) + 1)}
    return limits


def program_inputs(tests):
    """What the program is given for each test: a call's arguments, a standard input, or (assert-style)
    the calls to evaluate. Never an expected value."""
    if tests.get("testtype") == "code":
        return [call_sources(asserts) for asserts in tests["asserts"]]
    if tests.get("fn_name"):
        return [call_of(x) for x in tests["inputs"]]
    return [str(x) for x in tests["inputs"]]


def release_fallbacks(code):
    """The names the release's grader tries when the test's function is not defined by its name
    (feedback/code.py, `run_test_func`): the first top-level `def`, then the last word before the first
    '('. A `class Solution` method is never found there (LiveCodeBench's starter code scores 0)."""
    try:
        names = [node.name for node in ast.parse(code).body if isinstance(node, ast.FunctionDef)][:1]
    except (SyntaxError, ValueError, RecursionError, MemoryError):   # (it fails to compile in the jail too)
        names = []
    words = code.split("(")[0].split()
    return names + words[-1:]


def batch_of(jobs, kind, filtered):
    """What the jail's interpreter reads: per program its own job (code and test *inputs*, never an
    expected value), the limits, the program runner and the seccomp filter's parts."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    batch = {"jobs": [], "parallel": PARALLEL, "cwd": "/tmp" if kind else None, "python": interpreter(),
             "runner": RUNNER, "filter": seccomp_filter() if filtered else None, "fail": FAIL_LAYER}
    for i, code, tests, lim in jobs:
        names = [n for n in TYPING_PRELUDE if n in code]
        inputs = program_inputs(tests)
        needs = json.dumps(inputs) if tests.get("testtype") == "code" else ""
        run = {"code": code, "fn_name": tests.get("fn_name"), "inputs": inputs, "entry": tests.get("entry"),
               "fallbacks": release_fallbacks(code) if tests.get("lookup") == "release" else None,
               "mode": tests.get("testtype"), "allowed": list(ALLOWED_MODULES), "typing": names,
               # the allowed modules the program names, loaded before it runs (typing for the prelude's names)
               "preload": [m for m in ALLOWED_MODULES if m in code or (m == "typing" and names)
                           or (m == "fractions" and '"$fraction"' in needs) or (m == "decimal" and '"$decimal"' in needs)],
               # (3) as root without a jail: uid 61000 + k (in a jail: the jail's user)
               "uid": UID_BASE + i % 1000 if as_root and not kind else None,
               "limits": {"print": lim["print"]}, "fail": FAIL_LAYER}
        batch["jobs"].append({"i": i, "run": run, "wall": lim["wall"], "result": lim["result"],
                              "limits": {k: lim[k] for k in ("cpu", "mem", "files", "signals")}})
    return batch


# ---- memory the caps count: a cgroup around each jail, where the machine gives one ----
CGROUPS = []   # the cgroups made here and not yet removed (a jail that would not die keeps its own)


def memory_cgroup(limit):
    """A memory cgroup for one jail (its directory), or None: as root, under this process's own memory cgroup, in
    cgroup v2 (memory.max) or v1 (memory.limit_in_bytes). It charges everything the jail's processes hold or pin
    (pipe buffers, page cache, kernel memory), which the address-space cap does not count, and a jail over it is
    killed inside it, never the trainer. Where there is none (not root, no writable memory controller),
    docs/RELIABILITY.md says what is left: the address-space cap and the seccomp filter's refusals."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        for line in open("/proc/self/cgroup").read().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "" and "memory" in open("/sys/fs/cgroup/cgroup.controllers").read().split():
                where, limit_file = os.path.join("/sys/fs/cgroup", path.lstrip("/")), "memory.max"   # v2
            elif "memory" in controllers.split(","):
                where, limit_file = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/")), "memory.limit_in_bytes"
            else:
                continue
            group = tempfile.mkdtemp(prefix="sdpo-jail-", dir=where)
            with open(os.path.join(group, limit_file), "w") as f:
                f.write(str(limit))
            CGROUPS.append(group)
            return group
    except OSError:
        return None
    return None


def remove_cgroup(group, wait=2.0):
    """A jail's cgroup, once its processes are gone. The jail's last processes die a moment after its first is
    reaped (the kernel tears the PID namespace down), and cgroup v1 refuses the rmdir (EBUSY) until then: so any
    process still charged to it is killed (it can only be the jail's), and the rmdir is retried for up to `wait`
    seconds. A process asleep in the kernel past that leaves the group behind, and the grading goes on."""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError):   # EBUSY while a process is still charged to it
            os.rmdir(group)
        if not os.path.exists(group):
            with contextlib.suppress(ValueError):
                CGROUPS.remove(group)
            return
        if time.monotonic() > deadline:
            return
        with contextlib.suppress(OSError, ValueError):
            for pid in open(os.path.join(group, "cgroup.procs")).read().split():
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.02)


def start(jobs, workdir, kind, filtered):
    """Launch one jail (None: --unsafe-code) whose interpreter runs these jobs [(i, code, tests, limits)],
    each under the seccomp filter when filtered, inside a memory cgroup where the machine gives one."""
    argv = (jail_argv(kind, workdir) if kind else []) + [interpreter(), "-I", "-S", "-c", HARNESS]
    if FAIL_LAYER == "jail":   # (tests only) a jail that cannot start
        argv = [interpreter(), "-c", "import sys; sys.exit(3)"]
    group = memory_cgroup(min(PARALLEL, len(jobs)) * max(lim["mem"] for *_, lim in jobs) + 256 * 2**20)

    def join_cgroup():   # in the child, before anything of the jail starts: every process it makes is charged
        if group:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    proc = spawn_jail(kind, argv,
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workdir,
                      env={"PATH": "/usr/bin:/bin"}, start_new_session=True, preexec_fn=join_cgroup)
    proc.cgroup = group
    with contextlib.suppress(OSError):   # it died at once: its programs score 0 below
        proc.stdin.write(json.dumps(batch_of(jobs, kind, filtered)).encode())
        proc.stdin.close()
    return proc


def stop(proc):
    """Kill the jail's whole session and reap it, waiting at most 5 s: a jail whose last process sleeps where
    SIGKILL cannot reach it (a hung filesystem) is left to the kernel, and the grading goes on."""
    with contextlib.suppress(OSError):   # already gone
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    proc.stdout.close()
    if getattr(proc, "cgroup", None):
        remove_cgroup(proc.cgroup)


def nesting(text):
    """The deepest [ / { nesting of a JSON text (brackets inside strings do not count). Linear time: a
    string runs to its closing quote or, unterminated, to the end (one match; no retry from each quote)."""
    depth = deepest = 0
    for ch in re.findall(r"[\[\]{}]", re.sub(r'"(?:[^"\\]|\\.)*(?:"|\\?$)', "", text)):
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_line(line):
    """One outcome line a program sent, or an error outcome (for it alone) if it is not JSON or nests
    deeper than MAX_DEPTH (the decoder's recursion would otherwise stop the whole batch)."""
    if nesting(line) > MAX_DEPTH:
        return ["error", "output nested too deep"]
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return ["error", "unreadable output"]


def outcomes_of(buf, n_tests, timed_out):
    """The per-test outcomes a program sent (one JSON line each), completed to one per test: the test
    it was running when stopped is a timeout (or a crash), the ones after it never ran."""
    outcomes = [read_line(line) for line in bytes(buf).decode(errors="replace").splitlines()[:n_tests]]
    if len(outcomes) < n_tests and timed_out:
        outcomes.append(["timeout"])
    elif len(outcomes) < n_tests and not (outcomes and outcomes[-1][:1] == ["error"]):   # (after an error: not run)
        outcomes.append(["error", "the program stopped (a crash or a limit)"])
    return outcomes + [["not run"]] * (n_tests - len(outcomes))


def graded(buf, tests, timed_out, limits):
    """(score, outcomes) of one program from the bytes it sent: its claims compared here with the tests."""
    n = len(tests["outputs"])
    if len(buf) > limits["result"]:   # over the cap: nothing it claimed is read
        return 0.0, [["error", "output over the size limit"]] + [["not run"]] * (n - 1)
    try:
        outcomes = judged_outcomes(outcomes_of(buf, n, timed_out), tests)
        return (1.0 if len(outcomes) == n and all(outcomes.passed) else 0.0), outcomes
    except Exception:   # whatever it sent, it can only ever zero itself
        return 0.0, [["error", "unreadable output"]] + [["not run"]] * (n - 1)


def unframe(stream, bufs, ends, cap):
    """Move the complete frames at the head of a jail's output into bufs {i: program i's bytes, kept up to
    cap + 1} and ends {i: out of time?}; what is left is an incomplete frame."""
    while True:
        nl = stream.find(b"\n", 0, 64)
        if nl < 0:
            if len(stream) >= 64:   # not a frame (the harness never writes one): nothing more is read
                stream.clear()
            return
        head = stream[:nl].split()
        if len(head) in (3, 4) and head[1] == b"end":
            ends[int(head[0])] = head[2] == b"1"
            if head[3:] and head[3].startswith(b"layer"):   # a layer failed to install: the program did not run
                print(f"warning: a CODING program (batch slot {int(head[0])}) did not run: "
                      f"{LAYERS.get(int(head[3][5:]), 'a layer')} failed to install; it scores 0", file=sys.stderr)
            if head[3:] == [b"stuck"]:   # killed, but asleep where SIGKILL cannot reach it: left to the kernel
                print(f"warning: a CODING program (batch slot {int(head[0])}) did not die when killed (asleep in the "
                      f"kernel); it scores 0 and its siblings were graded without waiting for it", file=sys.stderr)
            del stream[:nl + 1]
            continue
        i, n = int(head[0]), int(head[1])
        if len(stream) < nl + 1 + n:
            return
        if len(bufs[i]) <= cap:
            bufs[i] += stream[nl + 1:nl + 1 + min(n, cap + 1 - len(bufs[i]))]
        del stream[:nl + 1 + n]


def run_jails(groups, tmp, kind, filtered, limits):
    """Each group of jobs [(i, code, tests, limits)] in a jail of its own, PARALLEL jails at a time (a
    group of one program each, or one group when the programs share a jail): {i: (its bytes, out of time?)}.
    A jail is stopped when its programs' wall limits (PARALLEL at a time) and 5 s more have passed."""
    out, running, sel = {}, {}, selectors.DefaultSelector()
    groups = list(groups)

    def finish(fd, timed_out):
        proc, _, _, bufs, ends = running.pop(fd)
        sel.unregister(proc.stdout)
        stop(proc)
        if not ends and not timed_out and proc.returncode:   # (0) the jail itself did not start: nothing ran in it
            print(f"warning: the OS jail ({kind or 'none'}) did not start (exit {proc.returncode}): its {len(bufs)} "
                  f"CODING program(s) did not run and score 0", file=sys.stderr)
        for i, buf in bufs.items():   # a program the jail did not see end (it was stopped) ran out of time with it
            out[i] = (buf, ends.get(i, timed_out))

    while groups or running:
        while groups and len(running) < PARALLEL:
            group = groups.pop(0)
            proc = start(group, tempfile.mkdtemp(dir=tmp), kind, filtered)
            budget = sum(lim["wall"] for *_, lim in group) / min(PARALLEL, len(group)) + max(lim["wall"] for *_, lim in group) + 5
            running[proc.stdout.fileno()] = (proc, time.monotonic() + budget, bytearray(),
                                             {i: bytearray() for i, *_ in group}, {})
            sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = min(r[1] for r in running.values())
        for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
            chunk = os.read(key.fd, 1 << 16)
            _, _, stream, bufs, ends = running[key.fd]
            stream += chunk
            try:
                unframe(stream, bufs, ends, limits["result"])
            except (ValueError, KeyError, IndexError):   # (the harness never writes such a frame)
                stream.clear()
            if not chunk:   # the jail has ended
                finish(key.fd, timed_out=False)
        now = time.monotonic()
        for fd in [fd for fd, r in running.items() if r[1] <= now]:   # out of time
            finish(fd, timed_out=True)
    sel.close()
    return out


def seccomp_filter():
    """[AUDIT_ARCH, [the refused calls' numbers], {checked call: number}, fcntl's allowed commands, madvise's
    allowed advice] for this machine (SYSCALLS), or None."""
    arch = SYSCALLS.get(os.uname().machine) if hasattr(os, "uname") else None
    return None if arch is None else [arch[0], sorted(arch[1].values()), arch[2], list(FCNTL_ALLOWED),
                                      list(MADVISE_ALLOWED)]


@functools.lru_cache(maxsize=None)
def shares_jail(kind):
    """Whether the seccomp filter (0b) works with a jail of this kind here: there is one for this machine,
    and a probe program runs under it. Then a batch's programs share a jail (SHARED_JAIL); else each
    program gets a jail of its own, without the filter."""
    if seccomp_filter() is None:
        return False
    tests = parse_tests(json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [11]}))
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        buf, _ = run_jails([[(0, "f = lambda x: x + 10", tests, LIMITS)]], tmp, kind, True, LIMITS)[0]
    return graded(buf, tests, False, LIMITS)[0] == 1.0


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
    todo = [(i, code, t, limits_for(t, limits)) for i, code, t in todo if t is not None and isinstance(code, str)]
    if todo:
        check_jail()
    kind = jail()
    filtered = bool(todo) and shares_jail(kind)   # (0b) the filter works here
    shared = filtered and SHARED_JAIL
    with tempfile.TemporaryDirectory(prefix="sandbox-") as tmp:
        sent = run_jails([todo] if shared else [[job] for job in todo], tmp, kind, filtered, limits)
    for i, code, tests, _ in todo:
        results[i] = graded(sent[i][0], tests, sent[i][1], limits)
    return [results[i] for i in slot]


def run_programs(jobs, limits=None):
    """Run (code, tests) pairs in the sandbox; returns 1.0 / 0.0 per job, in order."""
    return [score for score, _ in run_programs_detailed(jobs, limits)]
