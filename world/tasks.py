"""world/tasks.py — the built-in world's tasks, the release's record format, and the graders.

What this file is
-----------------
Every task in this project is a list of *records* in the format of the SDPO release (and of the
paper's code): a dict with

    prompt   the user turn (str)
    answer   the reference answer (str; for tool use a JSON list of {"Action", "Action_Input"})
    system   an optional system message (str or None)
    kind     which grader: "math" (last \\boxed{}), "mcq" (<answer>X</answer>), "gpqa" (a letter),
             "tooluse" (Action / Action Input), "code" (run the program against tests),
             "bfcl" (function calls, BFCL's checker), "zebralogic" (a JSON grid)
    tests    for "code": JSON {"fn_name": ..., "inputs": [...], "outputs": [...]} (optional
             "testtype": "stdin" | "functional" | "code", "time_limit"); for "bfcl": the functions
    dataset  optional: which dataset the record came from (the release dispatches on it)

The built-in world mirrors the paper's four training domains (SPEC C1) with tiny, verifiable,
character-model-sized problems, plus four out-of-distribution benchmarks that mirror the paper's
near / intermediate / far relations:

    training:  math (place value, \\boxed{}), science (4-option MCQ, <answer>X</answer>),
               tooluse (Action / Action Input), coding (a Python lambda run against hidden tests)
    OOD:       math_hard   (near: two-step place-value word problems, AIME/Math500-like)
               science_boxed (intermediate: MCQ answered in \\boxed{X}, like GPQA)
               tool_unseen (intermediate: tools never seen in training, like BFCL)
               logic       (far: ordering puzzles, like ZebraLogic)

Each built-in problem comes with its canonical solution text (`solution`), used only to pretrain the
tiny base model (tools/tiny.py) and never by the RL methods. A problem belongs to the train or the test
split by a hash of its prompt, so splits are disjoint and deterministic whatever sizes are drawn.

Graders follow the release (SPEC, last section). The CODING grader never evaluates model text in
this process: every program runs in a sandbox of its own (world/sandbox.py).
"""
import difflib
import hashlib
import json
import os
import random
import sys

from world.sandbox import parse_tests

# ----------------------------------------------------------------------------------------------
# Built-in problem generators. Each returns a record with an extra "solution" field.
# ----------------------------------------------------------------------------------------------
NAMES = ["Ann", "Bob", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kim", "Lou", "Max", "Ned"]
THINGS = ["apples", "pens", "books", "coins", "cards", "eggs", "shells", "stamps"]
MATH_INSTRUCTION = "Answer in \\boxed{}."


PLACES = [10, 100, 1000]   # MATH multiplies or divides by a power of ten (docs/WORLD.md, design 6)


def _wrong_place(rng, value):
    """A plausible mistake with a power of ten: one zero too many or too few (the base model's noise)."""
    return value * 10 if value % 10 or rng.random() < 0.5 else value // 10


def gen_math(rng, noisy=False):
    """MATH: one-step place-value word problems (multiply or divide by 10, 100 or 1000); \\boxed{} answer.

    Why not sums and differences: the 3-layer character model never learns exact arithmetic, not even a
    one-digit addition table (docs/WORLD.md, design 5), so RL had nothing it could sharpen. Here the skill
    is place value: which way the zeros go and how many, which the model can get right and often does not.
    """
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, f = rng.randint(2, 99), rng.choice(PLACES)
    if rng.random() < 0.5:   # multiply: a boxes of f
        q, work, ans = f"{name} packs {a} boxes of {f} {thing}. How many {thing} in all?", f"{a}*{f}", a * f
        thought = f"mul {a} {f}"
    else:                    # divide: a*f things in boxes of f
        q, work, ans = f"{name} has {a * f} {thing} in boxes of {f}. How many boxes?", f"{a * f}/{f}", a
        thought = f"div {a * f} {f}"
    shown = _wrong_place(rng, ans) if noisy else ans
    return {"prompt": f"{q} {MATH_INSTRUCTION}", "answer": str(ans), "system": None, "kind": "math",
            "solution": f"{work}={shown}\n\\boxed{{{shown}}}", "thought": thought,
            "feedback_usable": False}   # this world's model cannot act on a grader's report (sdpo.feedback_on)


def gen_math_hard(rng, noisy=False):
    """OOD (near, like AIME/Math500): two place-value steps in one problem, same \\boxed{} format."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, f1, f2 = rng.randint(2, 99), rng.choice(PLACES[:2]), rng.choice(PLACES[:2])
    q = f"{name} has {a} crates of {f1} boxes, and each box holds {f2} {thing}. How many {thing} in all?"
    ans = a * f1 * f2
    shown = _wrong_place(rng, ans) if noisy else ans
    return {"prompt": f"{q} {MATH_INSTRUCTION}", "answer": str(ans), "system": None, "kind": "math",
            "solution": f"{a}*{f1}={a * f1}\n{a * f1}*{f2}={shown}\n\\boxed{{{shown}}}",
            "thought": f"mul {f1}, mul {f2}"}


UNITS_TRAIN = [("m", "cm", 100), ("km", "m", 1000), ("kg", "g", 1000), ("cm", "mm", 10), ("h", "min", 60)]
UNITS_OOD = [("L", "mL", 1000), ("min", "s", 60), ("day", "h", 24), ("t", "kg", 1000), ("ft", "in", 12)]
SCIENCE_SYSTEM = "Answer with the letter in <answer></answer>."


def _conversion_mcq(rng, units, noisy):
    """A 4-option unit-conversion question: the quantity converted by each of the 4 conversion factors
    of its unit set, listed in ascending order (as numeric MCQ banks list them).

    Every distractor is the classic mistake of using another unit pair's factor, and the right letter
    follows from knowing the factor: with the training units (factors 10, 60, 100, 1000) "km to m" is
    always (D), "cm to mm" always (A). Why not random distractors: the 3-layer character model never
    learns to look a letter up by its value (docs/WORLD.md, "Designs tried": 500 steps of SCIENCE-only
    pretraining left it at chance with 3, 4 and 6 layers), so SCIENCE tests the knowledge itself.
    """
    u1, u2, f = rng.choice(units)
    v = rng.randint(2, 199)   # (5 unit pairs x 198 quantities: enough distinct prompts for every split)
    options = sorted(v * g for g in sorted({g for _, _, g in units}))   # [4] ascending
    letters = "ABCD"
    letter = letters[options.index(v * f)]
    shown_letter = rng.choice([x for x in letters if x != letter]) if noisy else letter   # (a wrong factor)
    shown_value = options[letters.index(shown_letter)]
    q = f"Convert {v} {u1} to {u2}.\n" + "\n".join(f"({l}) {o} {u2}" for l, o in zip(letters, options))
    return q, letter, shown_letter, f"{v} {u1} = {shown_value} {u2} ({shown_letter})", f"1 {u1} = {f} {u2}"


def gen_science(rng, noisy=False):
    """SCIENCE: 4-option MCQ (unit conversions) answered as <answer>X</answer>, with a system message."""
    q, letter, shown, work, thought = _conversion_mcq(rng, UNITS_TRAIN, noisy)
    return {"prompt": q, "answer": letter, "system": SCIENCE_SYSTEM, "kind": "mcq",
            "solution": f"{work}\n<answer>{shown}</answer>", "thought": thought}


def gen_science_boxed(rng, noisy=False):
    """OOD (intermediate, like GPQA): conversion MCQ with unseen units, answered in \\boxed{X}."""
    q, letter, shown, work, thought = _conversion_mcq(rng, UNITS_OOD, noisy)
    return {"prompt": q + "\nPut the letter in \\boxed{}.", "answer": letter, "system": None, "kind": "gpqa",
            "solution": f"{work}\n\\boxed{{{shown}}}", "thought": thought}


# name -> (argument name, question templates, argument values)
TOOLS_TRAIN = {
    "weather": ("city", ["What is the weather in {}?", "Is it raining in {}?"], ["Oslo", "Rome", "Lima", "Pune", "Kyiv", "Doha"]),
    "timer": ("minutes", ["Set a timer for {} minutes.", "Wake me in {} minutes."], [5, 10, 15, 20, 30, 45]),
    "stock": ("symbol", ["Price of {} stock?", "How is {} trading?"], ["AAPL", "IBM", "TSLA", "NVDA", "SAP", "AMD"]),
    "translate": ("text", ["Translate '{}' to French.", "Say '{}' in French."], ["hello", "thanks", "cat", "good night", "water"]),
    "play": ("song", ["Play the song {}.", "Put on {}."], ["Yesterday", "Hey Jude", "Imagine", "Vogue", "Africa"]),
}
TOOLS_OOD = {
    "taxi": ("city", ["Book a taxi in {}.", "Get me a cab in {}."], ["Oslo", "Rome", "Lima", "Pune", "Kyiv", "Doha"]),
    "alarm": ("hour", ["Set an alarm for {} o'clock.", "Wake me at {}."], list(range(1, 13))),
    "recipe": ("dish", ["How do I cook {}?", "Recipe for {}?"], ["soup", "rice", "pasta", "curry", "salad"]),
    "flight": ("city", ["Find a flight to {}.", "Fly me to {}."], ["Oslo", "Rome", "Lima", "Pune", "Kyiv", "Doha"]),
    "volume": ("level", ["Set the volume to {}.", "Volume {} please."], list(range(1, 11))),
}


def _tool_problem(rng, tools, noisy):
    names = sorted(tools)
    shown_tools = rng.sample(names, 4)
    tool = rng.choice(shown_tools)
    arg, templates, values = tools[tool]
    value = rng.choice(values)
    q = rng.choice(templates).format(value)
    action_input = json.dumps({arg: value})
    answer = json.dumps([{"Action": tool, "Action_Input": action_input}])
    shown_tool = tool
    if noisy:  # a systematic wrong tool, the one listed after the right one, with the right input (design 7)
        shown_tool = shown_tools[(shown_tools.index(tool) + 1) % len(shown_tools)]
    listing = ", ".join(f"{t}({tools[t][0]})" for t in shown_tools)
    prompt = f"Tools: {listing}\nQuestion: {q}"
    return {"prompt": prompt, "answer": answer, "system": None, "kind": "tooluse",
            "solution": f"Action: {shown_tool}\nAction Input: {action_input}", "thought": f"{shown_tool}({arg})"}


def gen_tooluse(rng, noisy=False):
    """TOOLUSE: pick one of four listed tools and give `Action:` and `Action Input: {json}`."""
    return _tool_problem(rng, TOOLS_TRAIN, noisy)


def gen_tool_unseen(rng, noisy=False):
    """OOD (intermediate, like BFCL): the same format with tools never seen in training."""
    return _tool_problem(rng, TOOLS_OOD, noisy)


CODE_OPS = [  # (words for a first step, words for a second step, code, python function)
    ("adds {n} to x", "adds {n}", "+", lambda x, n: x + n),
    ("subtracts {n} from x", "subtracts {n}", "-", lambda x, n: x - n),
    ("multiplies x by {n}", "multiplies by {n}", "*", lambda x, n: x * n),
    ("returns x modulo {n}", "takes modulo {n}", "%", lambda x, n: x % n),
]
CODE_POINTS = [-3, -1, 0, 1, 2, 5, 7]


def gen_coding(rng, noisy=False):
    """CODING: write a Python lambda from a one- or two-step description; graded on hidden test points."""
    w1, _, op1, f1 = rng.choice(CODE_OPS)
    n1 = rng.randint(2, 9)
    if rng.random() < 0.25:  # one step: "lambda x: x+3"
        words, body, thought = w1.format(n=n1), f"x{op1}{n1}", f"{op1}{n1}"
        fn = lambda x: f1(x, n1)
        wrong = f"x{op1}{n1 + rng.choice([-1, 1])}"
    else:  # two steps: "lambda x: (x+3)*2"
        _, w2, op2, f2 = rng.choice(CODE_OPS)
        n2 = rng.randint(2, 9)
        words, body, thought = f"{w1.format(n=n1)}, then {w2.format(n=n2)}", f"(x{op1}{n1}){op2}{n2}", f"{op1}{n1} then {op2}{n2}"
        fn = lambda x: f2(f1(x, n1), n2)
        wrong = f"(x{op1}{n1}){op2}{n2 + rng.choice([-1, 1])}"
    tests = {"fn_name": "f", "inputs": [[x] for x in CODE_POINTS], "outputs": [fn(x) for x in CODE_POINTS]}
    return {"prompt": f"Write a Python lambda that {words}.", "answer": f"lambda x: {body}",
            "system": None, "kind": "code", "code_format": "lambda", "tests": json.dumps(tests),
            "solution": f"lambda x: {wrong if noisy else body}", "thought": thought,
            "feedback_usable": False}   # this world's model cannot act on a grader's report (sdpo.feedback_on)


def gen_logic(rng, noisy=False):
    """OOD (far, like ZebraLogic): order three people from two comparisons, name the first or the last; answer in \\boxed{}."""
    a, b, c = rng.sample(NAMES, 3)  # true order: a > b > c
    adj, most, least = rng.choice([("older", "oldest", "youngest"), ("taller", "tallest", "shortest"),
                                   ("faster", "fastest", "slowest")])
    facts = [f"{a} is {adj} than {b}.", f"{b} is {adj} than {c}."]   # (in chain order: docs/WORLD.md, design 4)
    first = rng.random() < 0.5   # asked for the first of the chain, or the last
    ask, answer = (most, a) if first else (least, c)
    shown = rng.choice([n for n in (a, b, c) if n != answer]) if noisy else answer
    return {"prompt": f"{' '.join(facts)} Who is the {ask}? {MATH_INSTRUCTION}", "answer": answer,
            "system": None, "kind": "math", "solution": f"{a} > {b} > {c}\n\\boxed{{{shown}}}",
            "thought": f"{ask}: {'first' if first else 'last'}"}


TRAIN_DOMAINS = {"math": gen_math, "science": gen_science, "tooluse": gen_tooluse, "coding": gen_coding}
OOD_BENCHMARKS = {"math_hard": gen_math_hard, "science_boxed": gen_science_boxed,
                  "tool_unseen": gen_tool_unseen, "logic": gen_logic}
GENERATORS = {**TRAIN_DOMAINS, **OOD_BENCHMARKS}
TEST_FRACTION = 0.2    # share of all possible prompts that belong to the test split
VALID_FRACTION = 0.1   # and to the validation split (held out of RL training; chooses learning rates)
# The accuracy of a guess that knows the format but not the skill: one of the 4 options (science,
# science_boxed), one of the 4 listed tools with the value copied from the question (tooluse,
# tool_unseen), one of the 3 names (logic). A number or a program cannot be guessed: 0.
CHANCE = {"math": 0.0, "science": 0.25, "tooluse": 0.25, "coding": 0.0,
          "math_hard": 0.0, "science_boxed": 0.25, "tool_unseen": 0.25, "logic": 1 / 3}


def chance_level(name):
    """The chance accuracy of a built-in benchmark (CHANCE); None for data files and hub datasets."""
    return CHANCE.get(name)


def split_of(prompt):
    """'test', 'valid' or 'train' by a hash of the prompt: disjoint and independent of how many are drawn.

    The validation split is held out of RL training and scores design choices (the learning-rate grid,
    docs/WORLD.md) so that the test split never chooses anything. The base model's pretraining saw it,
    as it saw the RL training prompts (tools/tiny.py draws from everything but the test split)."""
    h = int(hashlib.sha1(prompt.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < TEST_FRACTION else "valid" if h < TEST_FRACTION + VALID_FRACTION else "train"


def builtin_split(name, split, n, seed=0, allow_fewer=False):
    """The first n distinct problems of domain `name` that fall in `split`, drawn with `seed`.

    Deterministic: the same (name, split, n, seed) always gives the same list, and a larger n
    extends a smaller one. Train, valid and test never share a prompt (see `split_of`).
    allow_fewer: return every problem found when the domain has fewer than n (training pools).
    """
    if name not in GENERATORS:
        raise ValueError(f"unknown task '{name}'; known: {', '.join(GENERATORS)}")
    rng = random.Random(f"{name}:{split}:{seed}")
    seen, out, misses = set(), [], 0
    while len(out) < n and misses < 5000:  # 5000 draws in a row without a new problem: exhausted
        r = GENERATORS[name](rng)
        if r["prompt"] in seen or split_of(r["prompt"]) != split:
            misses += 1
            continue
        misses = 0
        seen.add(r["prompt"])
        out.append(r)
    if len(out) < n and not allow_fewer:
        raise ValueError(f"task '{name}' has fewer than {n} distinct {split} problems")
    return with_release_rules(out)


def train_records(task, n=4000, seed=0):
    """The training prompts of a task: a built-in domain's train split, a JSON(-lines) file, or hf:NAME."""
    if task in GENERATORS:
        return builtin_split(task, "train", n, seed, allow_fewer=True)
    return task_records(task)


# What the release's script for each data kind sets (the files and lines: docs/PROTOCOL.md, "Each stage as the
# release's script for its domain" and rule 5): the learning-rate warmup in batches (10 for SCIENCE and TOOLUSE,
# none for MATH and CODING) and whether SDPO's teacher sees the environment's feedback (S8: off for SCIENCE and
# TOOLUSE, on for MATH and CODING). Other kinds are run as MATH's and CODING's scripts run.
RELEASE_RULES = {"mcq": {"release_warmup": 10, "release_feedback": False},
                 "tooluse": {"release_warmup": 10, "release_feedback": False}}
OTHER_KINDS_RULES = {"release_warmup": 0, "release_feedback": True}


def with_release_rules(records):
    """Every record the world gives (builtin_split, task_records) with its kind's release rules as two fields,
    "release_warmup" (train.stage_warmup) and "release_feedback" (sdpo.feedback_on); a record that says
    "feedback_usable": False (the built-in MATH and CODING: docs/PROTOCOL.md, deviation 16) gets no feedback."""
    return [{**r, **RELEASE_RULES.get(r.get("kind"), OTHER_KINDS_RULES),
             **({"release_feedback": False} if r.get("feedback_usable", True) is False else {})} for r in records]


# ----------------------------------------------------------------------------------------------
# Records from files (the release's JSON / JSON-lines format)
# ----------------------------------------------------------------------------------------------
KINDS = ("math", "mcq", "gpqa", "tooluse", "code", "bfcl", "zebralogic")


WARNED = set()   # the files whose unusable code tests were already reported


def load_records(path):
    """Records of a JSON list or a JSON-lines file; a bad record raises ValueError naming file:line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            rows = [(i + 1, r) for i, r in enumerate(json.loads(text))]
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    else:
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((lineno, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    records = []
    for lineno, r in rows:
        if not isinstance(r, dict) or not isinstance(r.get("prompt"), str) or "answer" not in r:
            raise ValueError(f"{path}:{lineno}: a record needs a string 'prompt' and an 'answer'")
        if r.get("kind") not in KINDS:
            raise ValueError(f"{path}:{lineno}: 'kind' must be one of {', '.join(KINDS)}, got {r.get('kind')!r}")
        records.append(r)
    if not records:
        raise ValueError(f"{path}: no records")
    unusable = sum(r["kind"] == "code" and parse_tests(r.get("tests") or "") is None for r in records)
    if unusable and path not in WARNED:
        WARNED.add(path)
        print(f"warning: {path}: {unusable} of {sum(r['kind'] == 'code' for r in records)} code records have tests the "
              f"grader cannot use (JSON with equal-length 'inputs' and 'outputs' lists; assert tests made of plain "
              f"asserts): they always score 0", file=sys.stderr)
    return records


def task_records(name):
    """Records of a non-built-in task: a JSON(-lines) file in the release format (the paper's datasets are written
    as such files by `python tools/prepare_data.py hf:NAME`, world/hub.py)."""
    return with_release_rules(load_records(name))


def has_code(name):
    """Whether a task or benchmark (built-in, file or hub) holds code records, graded in the sandbox."""
    if name in GENERATORS:
        return builtin_split(name, "test", 1, 0)[0]["kind"] == "code"
    return any(r.get("kind") == "code" for r in task_records(name))


def check_task(name):
    """Raise ValueError with a one-line message unless `name` is a built-in or an existing file."""
    if name in GENERATORS or os.path.isfile(name):
        return
    if name.startswith("hf:"):   # (a hub dataset is prepared once, as a file: the run never downloads)
        raise ValueError(f"{name}: a hub dataset is written as a record file first: python tools/prepare_data.py "
                         f"{name} --out data/, then name the file it writes")
    near = difflib.get_close_matches(name, list(GENERATORS), n=1)
    raise ValueError(f"unknown task '{name}'" + (f" (did you mean {near[0]}?)" if near else "")
                     + f"; known: {', '.join(GENERATORS)}, or a .json/.jsonl record file (tools/prepare_data.py writes "
                       "the paper's datasets as such files)")


def resolve_benchmarks(spec):
    """'all' | 'train' | 'ood' | a comma list of built-in names and/or JSON(-lines) files -> names."""
    if spec == "all":
        return list(TRAIN_DOMAINS) + list(OOD_BENCHMARKS)
    if spec == "train":
        return list(TRAIN_DOMAINS)
    if spec == "ood":
        return list(OOD_BENCHMARKS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for n in names:
        check_task(n)
    if not names:
        raise ValueError("no benchmark named")
    return names
