"""The commands the documents give a reader (README.md, LAB.md, docs/*.md, classroom/SOLUTIONS.md, results/README.md),
and each in its smallest form: the flags that shrink it appended (argparse keeps a flag's last value), or the
smaller variant a command has for that (`--quick`, `--fast`). tests/test_documented_commands.py runs every one in a
fresh checkout; `python tests/documented.py` lists them with how each is run.

A command with a placeholder (RUN_DIR, CKPT, N, …) is a template: its script is run with `--help`, and each flag it
names must be one of the script's. One is not run at all: the test suite's own command (it is what runs this).
"""
import glob
import os
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# docs/HISTORY.md is left out: it is the diary, and its commands record what was run then, with that day's flags
DOCS = ["README.md", "LAB.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
                                      if not p.endswith("HISTORY.md")),
        "classroom/SOLUTIONS.md", "results/README.md"]
TEMPLATE = re.compile(r"RUN_DIR|CKPT|\bDIR\b|\bN\b|\bS,|S,…|…|\.\.\.|\$[A-Z_]|Qwen/|allenai/|data/\w+/")
SUITE = ("-m pytest",)   # the suite's own commands: not run from inside it

RUN = ["--steps", "1", "--prompts-per-step", "4", "--group-size", "2", "--eval-n", "1", "--eval-k", "1",
       "--max-new-tokens", "8", "--threads", "1"]
SMALLEST = {   # script: flags appended to each of its commands
    "continual.py": RUN + ["--curve-every", "0", "--kl-samples", "1"],
    "evaluate.py": ["--n", "2", "--k", "1", "--max-new-tokens", "16", "--no-teacher-check"],
    "tools/drift.py": ["--kl-samples", "1"],
    "razor.py": [],
    "classroom/tokens.py": ["--prompts", "2", "--group-size", "2", "--show", "2", "--max-new-tokens", "16"],
    "classroom/lab.py": [],
    "tools/reference.py": ["--quick"], "tools/collapse.py": ["--quick"], "tools/world.py": ["--quick"],
    "tools/adequacy.py": ["--quick"], "tools/bench.py": ["--quick"],
    "tools/coding_ablation.py": ["--steps", "1", "--factors", "a", "--grpo-factors", "a", "--seeds", "0"],
    "tools/tiny.py": ["--steps", "2", "--out", "runs/tiny-smallest"],
    "tools/figures.py": [], "tools/tables.py": [], "tools/results.py": [], "analysis/claims.py": [],
    "tools/compare.py": [], "tools/mediation.py": ["--quick"], "tools/report.py": [], "tools/prepare_data.py": [],
    "tests/test_layout.py": [],
}
REPLACED = {   # a command whose smallest form is another of its own forms
    "python classroom/lab.py --all": "python classroom/lab.py --all --fast",
    "python classroom/lab.py --all --check": "python classroom/lab.py 9 --check",
    "python classroom/lab.py 3": "python classroom/lab.py 3 --fast",
    "torchrun --nproc_per_node 2 continual.py --method grpo --stages math":
        "torchrun --nproc_per_node 2 continual.py --method grpo --stages math --device cpu",
    "torchrun --standalone --nproc_per_node 2 continual.py --method sdpo --alpha 0.05":
        "torchrun --standalone --nproc_per_node 2 continual.py --method sdpo --alpha 0.05 --device cpu",
    # (on CPU, its memory step on the small real-vocabulary shape tests/test_fsdp.py uses: the 0.6B one needs ~22 GB)
    "bash tools/gpu_check.sh": "DEVICE=cpu NGPU=2 STEPS=0 MODEL=tiny MEM_SHAPE=cpu MEM_TOKENS=192 MEM_S=2 bash tools/gpu_check.sh",
    "python classroom/lab.py 7 12 --check": "python classroom/lab.py 9 --check",
}
TORCHRUN = ["--mini-batches", "2"]   # (GRPO's 4 mini-batches need 4 prompts on each of the 2 ranks; RUN gives 2)


# What the consumers of a finished run read, made first in their smallest form (under the names they read)
SETUP = [["python", "tools/reference.py", "--family", "regen", "--seeds", "0,10", "--quick"],
         ["python", "tools/world.py", "w2", "--quick"],
         ["python", "continual.py", "--method", "grpo,sdpo", "--seed", "0", "--name", "grpo+sdpo_a0.05-s0", *RUN,
          "--curve-every", "0", "--kl-samples", "1"],
         ["python", "continual.py", "--method", "sdpo", "--seed", "0", "--name", "sdpo_a0.05-s0", *RUN,
          "--curve-every", "0", "--kl-samples", "1"]]


def fewer_seeds(argv):
    """--seeds a,b,… -> its first seed; continual.py's --seed a,b,c -> its first two (a summary over seeds still)."""
    out = list(argv)
    for flag, keep in (("--seeds", 1), ("--seed", 2)):
        if flag in out and out.index(flag) + 1 < len(out):
            k = out.index(flag) + 1
            out[k] = ",".join(out[k].split(",")[:keep])
    return out


def commands():
    """[(command, the first document that gives it)] in the documents' order, each once: the lines of shell blocks
    (a `\\` continuation joined, a `#` comment cut) and the inline `python …`, `torchrun …` and `bash …` spans."""
    seen = {}
    for doc in DOCS:
        path = os.path.join(ROOT, doc)
        if not os.path.isfile(path):
            continue
        text, found = open(path).read(), []
        for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.split("  #")[0].strip().rstrip("&").strip()
                if line.startswith(("python ", "torchrun ", "bash ", "DEVICE=")):
                    found.append(line.split("; wait")[0])
        found += [m.strip() for m in re.findall(r"`((?:python|torchrun|bash) [^`]+)`", text)]
        for c in found:
            seen.setdefault(re.sub(r"\s+", " ", c), doc)
    return list(seen.items())


def script_of(command):
    """The file a command runs (continual.py, tools/bench.py, …), or None (python -c, -I -S, the suite)."""
    words = shlex.split(command.replace("…", "").replace("...", ""))
    words = [w for w in words if "=" not in w or w.startswith("-")]
    if not words:
        return None
    if words[0] == "bash":
        return words[1]
    rest = words[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-c", "-m"):
        rest = rest[2:] if rest[0] in ("--nproc_per_node", "--nnodes", "--node-rank", "--rdzv-backend",
                                       "--rdzv-endpoint") else rest[1:]
    return rest[0] if rest and rest[0].endswith(".py") else None


def how(command):
    """('run', argv) for a command run in its smallest form, ('template', script) for one with a placeholder,
    ('skip', why) for the suite's own."""
    if any(s in command for s in SUITE):
        return "skip", "the test suite's own command"
    if TEMPLATE.search(command.split(" -c ")[0] if " -c " in command else command):
        return "template", script_of(command)
    command = REPLACED.get(command, command)
    script = script_of(command)
    if not script:
        return "run", shlex.split(command)
    words = shlex.split(command)
    if "--overwrite-committed" in words and "--out" in words and words[words.index("--out") + 1].startswith("results/"):
        # (a committed file rewritten on purpose: written under runs/ here, so later commands read the committed one)
        k = words.index("--out") + 1
        words[k] = "runs/" + words[k]
        words.remove("--overwrite-committed")
        command = shlex.join(words)
    extra = TORCHRUN if command.startswith("torchrun") and "--method grpo" in command else []
    return "run", fewer_seeds(shlex.split(command)) + SMALLEST.get(script, []) + extra


def run(argv, log):
    """Run one command in this process (a script through runpy, python -c through exec) or, for torchrun, bash and
    interpreter flags, in a process of its own; its output into `log`. Returns its exit status."""
    import contextlib
    import runpy
    import subprocess
    env_words = [w for w in argv if re.fullmatch(r"[A-Z_]+=\S*", w)]
    argv = [w for w in argv if w not in env_words]
    with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        if argv[0] == "python" and (argv[1] == "-c" or argv[1].endswith(".py")):
            saved = sys.argv
            sys.argv = argv[1:] if argv[1].endswith(".py") else ["-c"]
            try:
                if argv[1] == "-c":
                    exec(compile(argv[2], "<documented -c>", "exec"), {"__name__": "__main__"})
                else:
                    runpy.run_path(argv[1], run_name="__main__")
                return 0
            except SystemExit as e:
                if isinstance(e.code, str):   # (what the interpreter would have printed)
                    print(e.code, file=sys.stderr)
                return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException as e:   # a traceback is a failure, said in the log
                import traceback
                traceback.print_exc()
                return f"{type(e).__name__}: {e}"[:300]
            finally:
                sys.argv = saved
        env = {**os.environ, **dict(w.split("=", 1) for w in env_words)}
        return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                              timeout=900).returncode


if __name__ == "__main__" and sys.argv[1:2] == ["--run"]:   # (the test's worker: a JSON list of argvs, in order)
    import json
    if len(sys.argv) != 5 or not os.path.isfile(sys.argv[2]) or not os.path.isdir(sys.argv[3]):
        print("error: --run is the test's worker: python tests/documented.py --run ARGVS.json CHECKOUT LOG_DIR "
              "(tests/test_documented_commands.py gives them); to list the commands, run it without flags",
              file=sys.stderr)
        sys.exit(2)
    os.chdir(sys.argv[3])
    sys.path.insert(0, sys.argv[3])
    for k, argv in enumerate(json.load(open(sys.argv[2]))):
        import time
        t0 = time.time()
        status = run(argv, os.path.join(sys.argv[4], f"{k}.log"))
        print(json.dumps({"argv": argv, "status": status, "seconds": round(time.time() - t0, 1)}), flush=True)
    sys.exit(0)
elif __name__ == "__main__":
    for command, doc in commands():
        kind, what = how(command)
        print(f"{kind:8s} {doc:24s} {' '.join(what) if kind == 'run' else (what or '')}"[:220])
    sys.exit(0)
