"""tasks.py — the built-in world's tasks, the release's record format, and the graders.

What this file is
-----------------
Every task in this project is a list of *records* in the format of the SDPO release (and of the
paper's code): a dict with

    prompt   the user turn (str)
    answer   the reference answer (str; for tool use a JSON list of {"Action", "Action_Input"})
    system   an optional system message (str or None)
    kind     which grader: "math" (last \\boxed{}), "mcq" (<answer>X</answer>),
             "tooluse" (Action / Action Input), "code" (run the program against tests)
    tests    for "code": JSON {"fn_name": ..., "inputs": [...], "outputs": [...]}

The built-in world mirrors the paper's four training domains (SPEC C1) with tiny, verifiable,
character-model-sized problems, plus four out-of-distribution benchmarks that mirror the paper's
near / intermediate / far relations:

    training:  math (\\boxed{}), science (4-option MCQ, <answer>X</answer>),
               tooluse (Action / Action Input), coding (a Python lambda run against hidden tests)
    OOD:       math_hard   (near: three-term word problems, AIME/Math500-like)
               science_boxed (intermediate: MCQ answered in \\boxed{X}, like GPQA)
               tool_unseen (intermediate: tools never seen in training, like BFCL)
               logic       (far: ordering puzzles, like ZebraLogic)

Each built-in problem comes with its canonical solution text (`solution`), used only to pretrain the
tiny base model (tiny.py) and never by the RL methods. A problem belongs to the train or the test
split by a hash of its prompt, so splits are disjoint and deterministic whatever sizes are drawn.

Graders follow the release (SPEC, last section). The CODING grader never evaluates model text in
this process: every program runs in a sandbox of its own (sandbox.py).
"""
import hashlib
import json
import os
import random
import re

from sandbox import run_programs

# ----------------------------------------------------------------------------------------------
# Built-in problem generators. Each returns a record with an extra "solution" field.
# ----------------------------------------------------------------------------------------------
NAMES = ["Ann", "Bob", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kim", "Lou", "Max", "Ned"]
THINGS = ["apples", "pens", "books", "coins", "cards", "eggs", "shells", "stamps"]
MATH_INSTRUCTION = "Answer in \\boxed{}."


def _wrong_number(rng, value):
    """A plausible mistake: off by one, or a dropped/added ten (used for the base model's noise)."""
    return value + rng.choice([-10, -1, 1, 10])


def gen_math(rng, noisy=False):
    """MATH: one-step arithmetic word problems; the answer goes in \\boxed{}."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    op = rng.choice(["add", "sub", "mul"])
    if op == "add":
        a, b = rng.randint(10, 39), rng.randint(2, 9)
        q, work, ans = f"{name} has {a} {thing} and gets {b} more. How many {thing} now?", f"{a}+{b}", a + b
    elif op == "sub":
        a, b = rng.randint(10, 39), rng.randint(2, 9)
        q, work, ans = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?", f"{a}-{b}", a - b
    else:
        a, b = rng.randint(2, 9), rng.randint(2, 5)
        q, work, ans = f"{name} buys {b} bags of {a} {thing}. How many {thing} in all?", f"{b}*{a}", a * b
    shown = _wrong_number(rng, ans) if noisy else ans
    return {"prompt": f"{q} {MATH_INSTRUCTION}", "answer": str(ans), "system": None, "kind": "math",
            "solution": f"{work}={shown}\n\\boxed{{{shown}}}", "thought": f"{op} {a} {b}"}


def gen_math_hard(rng, noisy=False):
    """OOD (near, like AIME/Math500): three-term problems, same \\boxed{} format."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b, c = rng.randint(10, 39), rng.randint(2, 9), rng.randint(2, 9)
    q = f"{name} has {a} {thing}, gets {b} more, then gives away {c}. How many {thing} now?"
    ans = a + b - c
    shown = _wrong_number(rng, ans) if noisy else ans
    return {"prompt": f"{q} {MATH_INSTRUCTION}", "answer": str(ans), "system": None, "kind": "math",
            "solution": f"{a}+{b}={a + b}\n{a + b}-{c}={shown}\n\\boxed{{{shown}}}", "thought": f"add {b}, sub {c}"}


UNITS_TRAIN = [("m", "cm", 100), ("km", "m", 1000), ("kg", "g", 1000), ("cm", "mm", 10), ("h", "min", 60)]
UNITS_OOD = [("L", "mL", 1000), ("min", "s", 60), ("day", "h", 24), ("t", "kg", 1000), ("ft", "in", 12)]
SCIENCE_SYSTEM = "Answer with the letter in <answer></answer>."


def _conversion_mcq(rng, units, noisy):
    """A 4-option unit-conversion question: the right value and three scaled distractors.

    Options are written value first, letter after ("28000 g (D)"), so that a small model can find the
    letter of the value it computed by reading forward.
    """
    u1, u2, f = rng.choice(units)
    v = rng.randint(2, 40)
    right = v * f
    wrong = [right * 10, v * f // 10 if f >= 100 else v * f * 100, v * f + f]
    options = [right] + [w for w in wrong if w != right][:3]
    rng.shuffle(options)
    letters = "ABCD"
    letter = letters[options.index(right)]
    shown_letter = rng.choice([x for x in letters if x != letter]) if noisy else letter
    shown_value = options[letters.index(shown_letter)]
    q = f"Convert {v} {u1} to {u2}.\n" + "\n".join(f"{o} {u2} ({l})" for l, o in zip(letters, options))
    return q, letter, shown_letter, f"{v} {u1} = {shown_value} {u2} ({shown_letter})", f"1 {u1} = {f} {u2}"


def gen_science(rng, noisy=False):
    """SCIENCE: 4-option MCQ (unit conversions) answered as <answer>X</answer>, with a system message."""
    q, letter, shown, work, thought = _conversion_mcq(rng, UNITS_TRAIN, noisy)
    return {"prompt": q, "answer": letter, "system": SCIENCE_SYSTEM, "kind": "mcq",
            "solution": f"{work}\n<answer>{shown}</answer>", "thought": thought}


def gen_science_boxed(rng, noisy=False):
    """OOD (intermediate, like GPQA): conversion MCQ with unseen units, answered in \\boxed{X}."""
    q, letter, shown, work, thought = _conversion_mcq(rng, UNITS_OOD, noisy)
    return {"prompt": q + "\nPut the letter in \\boxed{}.", "answer": letter, "system": None, "kind": "math",
            "solution": f"{work}\n\\boxed{{{shown}}}", "thought": thought}


# name -> (argument name, question templates, argument values)
TOOLS_TRAIN = {
    "weather": ("city", ["What is the weather in {}?", "Is it raining in {}?"], ["Oslo", "Rome", "Lima", "Pune", "Kyiv", "Doha"]),
    "timer": ("minutes", ["Set a timer for {} minutes.", "Wake me in {} minutes."], list(range(2, 60))),
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
    shown_tools = rng.sample(names, 3)
    tool = rng.choice(shown_tools)
    arg, templates, values = tools[tool]
    value = rng.choice(values)
    q = rng.choice(templates).format(value)
    action_input = json.dumps({arg: value})
    answer = json.dumps([{"Action": tool, "Action_Input": action_input}])
    shown_tool, shown_input = tool, action_input
    if noisy:  # a wrong tool, or the right tool with a wrong value
        if rng.random() < 0.5:
            shown_tool = rng.choice([t for t in shown_tools if t != tool])
        else:
            shown_input = json.dumps({arg: rng.choice([v for v in values if v != value])})
    listing = ", ".join(f"{t}({tools[t][0]})" for t in shown_tools)
    prompt = f"Tools: {listing}\nQuestion: {q}"
    return {"prompt": prompt, "answer": answer, "system": None, "kind": "tooluse",
            "solution": f"Action: {shown_tool}\nAction Input: {shown_input}", "thought": f"{shown_tool}({arg})"}


def gen_tooluse(rng, noisy=False):
    """TOOLUSE: pick one of three listed tools and give `Action:` and `Action Input: {json}`."""
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
            "system": None, "kind": "code", "tests": json.dumps(tests),
            "solution": f"lambda x: {wrong if noisy else body}", "thought": thought}


def gen_logic(rng, noisy=False):
    """OOD (far, like ZebraLogic): order three people from two comparisons; answer in \\boxed{}."""
    a, b, c = rng.sample(NAMES, 3)  # true order: a > b > c
    adj, ask = rng.choice([("older", "youngest"), ("taller", "shortest"), ("faster", "slowest")])
    facts = [f"{a} is {adj} than {b}.", f"{b} is {adj} than {c}."]
    rng.shuffle(facts)
    shown = rng.choice([a, b]) if noisy else c
    return {"prompt": f"{' '.join(facts)} Who is the {ask}? {MATH_INSTRUCTION}", "answer": c,
            "system": None, "kind": "math", "solution": f"{a} > {b} > {c}\n\\boxed{{{shown}}}",
            "thought": f"{ask}: last"}


TRAIN_DOMAINS = {"math": gen_math, "science": gen_science, "tooluse": gen_tooluse, "coding": gen_coding}
OOD_BENCHMARKS = {"math_hard": gen_math_hard, "science_boxed": gen_science_boxed,
                  "tool_unseen": gen_tool_unseen, "logic": gen_logic}
GENERATORS = {**TRAIN_DOMAINS, **OOD_BENCHMARKS}
TEST_FRACTION = 0.2  # share of all possible prompts that belong to the test split


def split_of(prompt):
    """'test' or 'train' by a hash of the prompt: disjoint and independent of how many are drawn."""
    h = int(hashlib.sha1(prompt.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < TEST_FRACTION else "train"


def builtin_split(name, split, n, seed=0, allow_fewer=False):
    """The first n distinct problems of domain `name` that fall in `split`, drawn with `seed`.

    Deterministic: the same (name, split, n, seed) always gives the same list, and a larger n
    extends a smaller one. Train and test never share a prompt (see `split_of`).
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
    return out


# ----------------------------------------------------------------------------------------------
# Records from files (the release's JSON / JSON-lines format)
# ----------------------------------------------------------------------------------------------
KINDS = ("math", "mcq", "tooluse", "code")


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
    return records


# ----------------------------------------------------------------------------------------------
# The paper's datasets on the Hugging Face hub: a task named 'hf:NAME' is loaded with
# datasets.load_dataset and turned into release-format records by a small adapter per dataset.
# Field names follow each dataset's public card. Rows an adapter cannot use return None (counted).
# ----------------------------------------------------------------------------------------------
BOXED_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
MCQ_SYSTEM = ("\nGiven a question and four options, please select the right answer. Respond in the following format:\n"
              "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n\nFor the answer, only output the letter "
              "corresponding to the correct option (A, B, C, or D), and nothing else.\n")


def _record(prompt, answer, kind, system=None, tests=None):
    return {"prompt": prompt, "answer": answer, "kind": kind, "system": system, "tests": tests}


def adapt_dapo_math(row):
    """BytedTsinghua-SIA/DAPO-Math-17k: prompt = chat list (its text already asks for \\boxed{}),
    reward_model.ground_truth = the answer."""
    return _record(row["prompt"][-1]["content"], str(row["reward_model"]["ground_truth"]), "math")


def adapt_problem_answer(row):
    """MATH-500 / AIME: 'problem' and 'answer' columns; graded on the last \\boxed{}."""
    return _record(row["problem"] + BOXED_SUFFIX, str(row["answer"]), "math")


def _lettered(question, options):
    return question + "\n\n" + "\n".join(f"{'ABCD'[i]}: {o}" for i, o in enumerate(options))


def adapt_sciknoweval(row, domain="chemistry"):
    """hicai-zju/SciKnowEval: question, choices {text, label}, answerKey, domain, type; only the
    domain's 4-option MCQ rows; answered <answer>X</answer> as in the release (SCIENCE domain)."""
    choices = row.get("choices") or {}
    if row.get("type") != "mcq-4-choices" or len(choices.get("text", [])) != 4 \
            or str(row.get("domain", "")).lower() != domain:
        return None
    prompt = _lettered(row["question"], choices["text"]) + "\nPlease reason step by step."
    return _record(prompt, row["answerKey"], "mcq", MCQ_SYSTEM)


def _shuffled(options, key):
    """A deterministic permutation of the options (seeded by the question), and where index 0 went."""
    order = list(range(len(options)))
    random.Random(hashlib.sha1(key.encode()).hexdigest()).shuffle(order)
    return [options[i] for i in order], order.index(0)


def adapt_gpqa(row):
    """Idavidrein/gpqa: Question, 'Correct Answer', 'Incorrect Answer 1..3' -> four shuffled options,
    the letter answered in \\boxed{} (as the paper's GPQA evaluation)."""
    options = [row["Correct Answer"]] + [row[f"Incorrect Answer {i}"] for i in (1, 2, 3)]
    options, right = _shuffled([o.strip() for o in options], row["Question"])
    prompt = _lettered(row["Question"].strip(), options) + "\nAnswer with the letter of the correct option in \\boxed{}."
    return _record(prompt, "ABCD"[right], "math")


def adapt_mmlu_redux(row):
    """edinburgh-dawg/mmlu-redux-2.0 (one config per subject): question, choices [4], answer (index)."""
    if len(row["choices"]) != 4:
        return None
    prompt = _lettered(row["question"], row["choices"]) + "\nAnswer with the letter of the correct option in \\boxed{}."
    return _record(prompt, "ABCD"[int(row["answer"])], "math")


def adapt_livecodebench(row):
    """livecodebench/code_generation_lite: question_content, public_test_cases (JSON list of
    {input, output, testtype}). Standard-input problems only; LeetCode-style functional ones are skipped."""
    cases = json.loads(row["public_test_cases"]) if isinstance(row["public_test_cases"], str) else row["public_test_cases"]
    if not cases or any(c.get("testtype") != "stdin" for c in cases):
        return None
    prompt = (row["question_content"] + "\n\nRead the inputs from stdin, solve the problem and write the answer to "
              "stdout. Enclose your code in ```python``` delimiters.")
    tests = json.dumps({"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases]})
    return _record(prompt, "", "code", tests=tests)


# name: (dataset id, config, split, adapter)
HUB_TASKS = {
    "dapo_math": ("BytedTsinghua-SIA/DAPO-Math-17k", None, "train", adapt_dapo_math),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", adapt_problem_answer),
    "aime24": ("HuggingFaceH4/aime_2024", None, "train", adapt_problem_answer),
    "aime25": ("math-ai/aime25", None, "test", adapt_problem_answer),
    "sciknoweval_chemistry": ("hicai-zju/SciKnowEval", None, "test", adapt_sciknoweval),
    "gpqa_diamond": ("Idavidrein/gpqa", "gpqa_diamond", "train", adapt_gpqa),
    "mmlu_redux": ("edinburgh-dawg/mmlu-redux-2.0", "abstract_algebra", "test", adapt_mmlu_redux),
    "livecodebench": ("livecodebench/code_generation_lite", "release_v6", "test", adapt_livecodebench),
}
HUB_NOT_SUPPORTED = {
    "toolalpaca": "use the release's TOOLUSE JSON-lines files (e.g. tooluse/train.json) as the task",
    "bfcl": "BFCL's multi-file, executable format has no adapter yet",
    "zebralogic": "ZebraLogic's grid answers need their own grader; not yet supported",
    "dolci_code": "use the release's CODING JSON-lines file as the task",
}


def load_hub_task(spec, load_dataset=None):
    """'hf:NAME' or 'hf:NAME:CONFIG' (e.g. hf:mmlu_redux:college_physics) -> release-format records."""
    parts = spec.split(":")
    name, config = parts[1], (parts[2] if len(parts) > 2 else None)
    if name in HUB_NOT_SUPPORTED:
        raise ValueError(f"{spec}: not yet supported — {HUB_NOT_SUPPORTED[name]}")
    if name not in HUB_TASKS:
        raise ValueError(f"{spec}: unknown hub task; known: {', '.join('hf:' + n for n in HUB_TASKS)}")
    path, default_config, split, adapter = HUB_TASKS[name]
    if load_dataset is None:
        from datasets import load_dataset
    rows = load_dataset(path, config or default_config, split=split)
    records = [r for r in (adapter(row) for row in rows) if r is not None]
    if len(records) < len(rows):
        print(f"{spec}: kept {len(records)} of {len(rows)} rows (the others have a format this adapter does not grade)")
    if not records:
        raise ValueError(f"{spec}: no usable records")
    return records


def task_records(name):
    """Records of a non-built-in task: a JSON(-lines) file in the release format, or 'hf:NAME'."""
    if name.startswith("hf:"):
        return load_hub_task(name)
    return load_records(name)


def one_line(exc):
    """An exception as one line: the message of a ValueError/OSError, else 'Type: first line'."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return msg if isinstance(exc, (ValueError, OSError)) and msg else f"{type(exc).__name__}: {msg}"


def check_task(name):
    """Raise ValueError with a one-line message unless `name` is a built-in, an existing file or a known hf: task."""
    if name in GENERATORS or os.path.isfile(name):
        return
    if name.startswith("hf:"):
        base = name.split(":")[1]
        if base in HUB_NOT_SUPPORTED:
            raise ValueError(f"{name}: not yet supported — {HUB_NOT_SUPPORTED[base]}")
        if base in HUB_TASKS:
            return
        raise ValueError(f"{name}: unknown hub task; known: {', '.join('hf:' + n for n in HUB_TASKS)}")
    raise ValueError(f"unknown task '{name}'; known: {', '.join(GENERATORS)}, a .json/.jsonl file, "
                     f"or hf:NAME ({', '.join(HUB_TASKS)})")


# ----------------------------------------------------------------------------------------------
# Graders (the release's, SPEC last section). Each takes (record, response) and returns 0.0 or 1.0.
# ----------------------------------------------------------------------------------------------
def last_boxed(text):
    """Content of the last \\boxed{...}, braces matched (so \\boxed{\\frac{1}{2}} works); None if absent."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None  # unbalanced: no answer


def normalize_answer(s):
    """Light normalisation: spaces, $, a trailing period, \\text{}, thousands separators, 12.0 -> 12.
    A tuple keeps its commas: (63,1,-1) is not (6,31,-1)."""
    s = s.strip().strip("$").rstrip(".").strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s).replace(" ", "").replace("\\!", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):   # thousands separators (1,000) only: never a tuple's commas
        s = s.replace(",", "")
    if re.fullmatch(r"-?\d+(\.\d+)?", s) and len(s) < 40:
        v = float(s)
        s = str(int(v)) if v == int(v) else str(v)
    return s


def grade_math(record, response):
    got = last_boxed(response)
    return float(got is not None and normalize_answer(got) == normalize_answer(str(record["answer"])))


def grade_mcq(record, response):
    start = response.rfind("<answer>")
    if start < 0:
        return 0.0
    end = response.find("</answer>", start)
    if end < 0:
        return 0.0
    return float(response[start + len("<answer>"):end].strip() == str(record["answer"]).strip())


def _json_object_after(text, pos, end=None):
    """Parse the JSON object that starts at the first '{' in text[pos:end] (nested braces fine)."""
    i = text.find("{", pos, len(text) if end is None else end)
    if i < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, i)
    except (json.JSONDecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def parse_actions(response):
    """All (name, input dict) pairs of `Action: name` / `Action Input: {json}` in a response.

    An action's input is the first JSON object after its `Action Input:` and before the next
    `Action:`. One pass over the text (linear: a flood of `Action:` lines costs no more than its length).
    """
    calls = list(re.finditer(r"Action:[ \t]*([^\n]*)", response))
    inputs = [(m.start(), m.end()) for m in re.finditer(r"Action Input:", response)]
    actions, j = [], 0
    for k, m in enumerate(calls):
        following = calls[k + 1].start() if k + 1 < len(calls) else len(response)
        while j < len(inputs) and inputs[j][0] < m.end():
            j += 1
        if j < len(inputs) and inputs[j][0] < following:
            actions.append((m.group(1).strip(), _json_object_after(response, inputs[j][1], following)))
        else:
            actions.append((m.group(1).strip(), None))
    return actions


def grade_tooluse(record, response):
    """The multiset of action names equals the reference, and the merged inputs equal the merged reference."""
    try:
        ref = json.loads(record["answer"]) if isinstance(record["answer"], str) else record["answer"]
        ref_names = sorted(a["Action"] for a in ref)
        ref_input = {}
        for a in ref:
            inp = a.get("Action_Input", "{}")
            ref_input.update(json.loads(inp) if isinstance(inp, str) else inp)
    except (ValueError, TypeError, KeyError):
        return 0.0
    actions = parse_actions(response)
    if sorted(name for name, _ in actions) != ref_names or any(inp is None for _, inp in actions):
        return 0.0
    merged = {}
    for _, inp in actions:
        merged.update(inp)
    return float(merged == ref_input)


def extract_code(response):
    """The program in a response: the last ```python block if any, else the whole text; a thinking
    model's trace (everything up to the last `</think>`) is never part of it."""
    response = response.rsplit("</think>", 1)[-1]
    blocks = re.findall(r"```(?:python|py)?\n(.*?)```", response, flags=re.S)
    return (blocks[-1] if blocks else response).strip()


def grade_code(record, response):
    return run_programs([(extract_code(response), record.get("tests") or "{}")])[0]


GRADERS = {"math": grade_math, "mcq": grade_mcq, "tooluse": grade_tooluse, "code": grade_code}


def grade(record, response):
    """Grade one response to one record (built-in or release format): 1.0 right, 0.0 wrong. Never raises."""
    try:
        return GRADERS[record["kind"]](record, response)
    except Exception:  # a grader bug must not kill a training run; a malformed answer is wrong
        return 0.0


def _reference_actions(record):
    ref = json.loads(record["answer"]) if isinstance(record["answer"], str) else record["answer"]
    return [a["Action"] for a in ref]


def feedback(record, response):
    """(S8) What the environment says about a *failed* response, as the release's graders return it
    beside the score: why it failed, without giving the answer away (TOOLUSE names the expected
    actions, as the release's does). None when there is nothing to say. Never raises.

    Example (math): "\\boxed{12}" for answer 14 -> "Your final answer 12 is incorrect."
    """
    try:
        kind = record["kind"]
        if kind == "math":
            got = last_boxed(response)
            return ("Your response did not contain a final answer in \\boxed{}." if got is None
                    else f"Your final answer {got.strip()} is incorrect.")
        if kind == "mcq":
            start = response.rfind("<answer>")
            end = response.find("</answer>", start) if start >= 0 else -1
            return ("Your response did not contain an answer between <answer> and </answer>." if end < 0
                    else f"Your answer {response[start + len('<answer>'):end].strip()} is incorrect.")
        if kind == "tooluse":
            names = [n for n, _ in parse_actions(response)]
            said = ", ".join(names) if names else "no action"
            return (f"Your tool calls were incorrect (you called: {said}). "
                    f"The expected actions were: {', '.join(_reference_actions(record))}.")
        if kind == "code":
            return "Your program did not pass all of the tests."
    except Exception:  # a malformed record or reference: no feedback, as if the grader had none
        return None
    return None


def grade_many(records, responses):
    """Grade a batch; the programs run in the sandbox, two at a time, each in its own interpreter."""
    scores = [None] * len(records)
    code_jobs = [(i, (extract_code(resp), rec.get("tests") or "{}"))
                 for i, (rec, resp) in enumerate(zip(records, responses)) if rec["kind"] == "code"]
    if code_jobs:
        for (i, _), s in zip(code_jobs, run_programs([job for _, job in code_jobs])):
            scores[i] = s
    return [s if s is not None else grade(rec, resp) for s, rec, resp in zip(scores, records, responses)]
