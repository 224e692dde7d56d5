"""Many short invocations of the project's scripts in one process: each script run as `python SCRIPT ARGS` would
run it (runpy, as __main__, with its own argv, working directory, stdout and stderr), its exit code that of
SystemExit, an uncaught exception its traceback and exit 1. A script's first start costs seconds (torch,
transformers); the bad-input and help tests start dozens, so they pay it once here. Each script starts from the
same sys.path and modules a fresh process would have imported by then, not a clean interpreter: a test that
needs a process of its own (signals, threads, a child's exit) starts one."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DRIVER = r'''
import contextlib, io, json, os, runpy, sys, traceback
root, cases = sys.argv[1], json.loads(sys.stdin.read())
sys.path.insert(0, root)
start_path, results = list(sys.path), []
for script, argv, cwd in cases:
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.chdir(cwd)
    sys.argv, sys.path[:] = [os.path.join(root, script), *argv], start_path
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(os.path.join(root, script), run_name="__main__")
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:                       # sys.exit("message"): printed, exit 1
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append([code, out.getvalue(), err.getvalue()])
sys.__stdout__.write(json.dumps(results))
'''


def run_scripts(cases, timeout=600):
    """cases: [(script relative to the repository, [args], working directory)]. Returns [(exit code, stdout,
    stderr)] in order, all from one Python process (one thread of torch, as the suite's workers)."""
    out = subprocess.run([sys.executable, "-c", DRIVER, ROOT], input=json.dumps([[s, a, str(c)] for s, a, c in cases]),
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"the scripts' process failed: {out.stderr[-2000:]}")
    return [tuple(r) for r in json.loads(out.stdout)]
