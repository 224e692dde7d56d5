"""Round five of the jail: it shows only what a program needs, a program's timers cannot use up the
grading user's signal queue, an interpreter under /tmp still gets the namespaced jails, and a preferred jail kind
that fails its probe says so. Each of these failed on c4c75d6."""
import json
import os
import tempfile

import pytest

from world import sandbox

STDIN_TESTS = json.dumps({"inputs": [""], "outputs": ["hidden"], "testtype": "stdin"})
PRELUDE = "import sys\nimp = sys.modules['builtins'].__import__\nos = imp('os')\n"   # (past the import layer)


def no_audit_hook(monkeypatch):
    """The jail alone, as the layer tests see it: the program's audit hook removed."""
    monkeypatch.setattr(sandbox, "RUNNER", sandbox.RUNNER.replace("sys.addaudithook(hook)", "pass"))


@pytest.mark.parametrize("kind", sandbox.JAILS)
def test_a_file_under_usr_src_is_not_visible_in_the_jail(kind, monkeypatch):
    if sandbox.first_working_jail((kind,)) is None:
        pytest.skip(f"no working {kind} here")
    if not os.access("/usr/src", os.W_OK):
        pytest.skip("/usr/src is not writable here (run as root)")
    monkeypatch.setattr(sandbox, "JAILS", (kind,))
    no_audit_hook(monkeypatch)
    secret = os.path.join("/usr/src", f"sdpo-jail-probe-{os.getpid()}.txt")
    with open(secret, "w") as f:
        f.write("expected outputs")
    try:
        reader = PRELUDE + f"print('seen' if os.path.exists({secret!r}) else 'hidden')"
        assert sandbox.run_programs([(reader, STDIN_TESTS)]) == [1.0]
        # the test can fail: a program looking at a file the jail does show (its own interpreter) sees it
        shown = PRELUDE + f"print('hidden' if os.path.exists({sandbox.interpreter()!r}) else 'no')"
        assert sandbox.run_programs([(shown, STDIN_TESTS)]) == [1.0]
    finally:
        os.remove(secret)


TIMERS = PRELUDE + r"""
try:
    ctypes = imp('ctypes')
    libc = ctypes.CDLL(None, use_errno=True)
    made = 0
    for _ in range(64):
        tid = ctypes.c_void_p()
        if libc.timer_create(1, None, ctypes.byref(tid)) != 0:
            break
        made += 1
except Exception:
    made = 0
print('hidden' if made <= 8 else f'made {made}')
"""


def test_a_program_keeps_to_a_few_posix_timers(monkeypatch):
    if sandbox.jail() is None:
        pytest.skip("no jail here")
    no_audit_hook(monkeypatch)
    assert sandbox.run_programs([(TIMERS, STDIN_TESTS)]) == [1.0]
    assert sandbox.LIMITS["signals"] <= 8


def test_an_interpreter_tree_under_tmp_still_gets_the_unshare_jail(monkeypatch):
    if os.geteuid() != 0 or sandbox.first_working_jail(("unshare",)) is None:
        pytest.skip("the unshare jail needs root here")
    dirs, links = sandbox.system_view()
    with tempfile.TemporaryDirectory(prefix="venv-like-", dir="/tmp") as tree:
        monkeypatch.setattr(sandbox, "system_view", lambda: (dirs + [tree], links))
        assert sandbox.first_working_jail.__wrapped__(("unshare",)) == "unshare"


def test_a_preferred_jail_that_fails_its_probe_says_so(monkeypatch, capsys):
    if sandbox.first_working_jail(("unshare",)) is None or not os.path.exists("/usr/bin/bwrap"):
        pytest.skip("needs bubblewrap and a working unshare jail")
    real = sandbox.jail_argv
    monkeypatch.setattr(sandbox, "jail_argv", lambda kind, d: ["sh", "-c", "echo broken by the test >&2; exit 3"]
                        if kind == "bwrap" else real(kind, d))
    assert sandbox.first_working_jail.__wrapped__(("bwrap", "unshare")) == "unshare"
    err = capsys.readouterr().err
    assert "the bwrap jail failed its probe here (broken by the test)" in err
