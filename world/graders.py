"""world/graders.py — the graders: the release's rules, one per record kind (SPEC, last section).

grade(record, response) -> 1.0 or 0.0, feedback(record, response) -> what the grader says of a failed answer
(S8's environment feedback), and their batched forms. The CODING grader never evaluates model text in this
process: every program runs in a jail of its own (world/sandbox.py)."""
import json
import logging
import re
import threading

from collections import Counter

from world.sandbox import parse_tests, passed_test, run_programs_detailed


# ----------------------------------------------------------------------------------------------
# Graders: the release's rules (verl/utils/reward_score/feedback/{math,mcq,gpqa,tooluse,code}.py,
# chosen by the record's kind). Each `check_*` returns (score, feedback): 1.0 or 0.0, and the string
# the release's grader returns beside it for SDPO's environment feedback (S8); "" = nothing to say.
# Where the release is wrong we keep the correct behaviour: docs/PROTOCOL.md lists every such place,
# with the case that shows it, and tests/test_grade_*.py hold them all.
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


NUMBER = re.compile(r"-?\d+(\.\d+)?")
# Judging is bounded at about a second a response (round six): an answer math-verify's sympy would take seconds on
# never reaches it — longer than the release reads (its last 100 characters), a power tower, an exponent of 4 or
# more digits, a factorial of anything but a small number, braces nested deeper than 4 — and math-verify's own
# timeouts are 1 s (on the main thread; elsewhere its alarm cannot be set, and the screen alone bounds it).
MATH_VERIFY_CHARS, MATH_VERIFY_SECONDS = 100, 1
COSTLY = re.compile(r"\^\s*\{[^{}]*\^|\^\s*\(?-?\w+\)?\s*\^|\^\s*\{?\s*\(?-?\d{4,}|(\d{3,}|[)}\]])\s*!|!\s*!|factorial|"
                    r"\\Gamma|\\binom")


def costly(expr):
    """Would sympy take seconds on this answer? (the screen before math-verify; see COSTLY)"""
    depth = deepest = 0
    for c in expr:
        depth += (c == "{") - (c == "}")
        deepest = max(deepest, depth)
    return len(expr) > MATH_VERIFY_CHARS or deepest > 4 or COSTLY.search(expr) is not None


def math_equivalent(gold, pred):
    """The release's fallback: math-verify decides whether two answers are the same mathematical object
    (14/3 = \\frac{14}{3}, x = 5 = 5, 90^\\circ = 90, \\sqrt 2 = \\sqrt{2}). Each side is parsed as the
    content of a \\boxed{} so that the whole answer is read (the release parses the bare strings, and
    math-verify then reads `6 - 5i` as 5). Plain numbers and plain words never reach it: numbers are
    already compared, and it would read a word as a product of symbols (`Cal` = `Lac`)."""
    if (NUMBER.fullmatch(gold) and NUMBER.fullmatch(pred)) or re.fullmatch(r"[A-Za-z]{2,}", gold) \
            or re.fullmatch(r"[A-Za-z]{2,}", pred) or costly(pred) or costly(gold):
        return False
    from math_verify import parse, verify   # (sympy behind it takes 0.5 s to import: only when first needed)
    logging.getLogger("math_verify").setLevel(logging.ERROR)   # (its timeouts would print the whole answer)
    limit = MATH_VERIFY_SECONDS if threading.current_thread() is threading.main_thread() else None
    try:
        return bool(verify(parse("\\boxed{" + gold + "}", parsing_timeout=limit),
                           parse("\\boxed{" + pred + "}", parsing_timeout=limit), timeout_seconds=limit))
    except Exception:  # math-verify's own errors (as in the release): not equivalent
        return False


MATH_FORMAT_FEEDBACK = "Your answer had the wrong format. The solution must be given in the format: \\boxed{your_answer}."


def check_math(record, response):
    """MATH: the last \\boxed{} of the whole response equals the answer — as text after light
    normalisation, or by math-verify (the release looks at the last 100 characters only)."""
    got, answer = last_boxed(response), str(record["answer"])
    if got is None or not got.strip():
        return 0.0, MATH_FORMAT_FEEDBACK
    right = got == answer or normalize_answer(got) == normalize_answer(answer) \
        or math_equivalent(normalize_answer(answer), normalize_answer(got))
    return float(right), ""    # a wrong answer in the right format gets no feedback (the release's default)


def check_mcq(record, response):
    """SCIENCE (SciKnowEval): the text after the last <answer>, up to </answer> if there is one,
    stripped, equals the letter. So `B`, `<answer>B` and `B</answer>` all count, as in the release."""
    got = response.split("<answer>")[-1].split("</answer>")[0].strip()
    return float(got == str(record["answer"]).strip()), ""


def answer_letter(text):
    """GPQA's rule: the last standalone A, B, C or D of the upper-cased text (else the text itself).
    We read the last \\boxed{} when there is one, which the prompt asks for: the release reads the whole
    response, where the article in `\\boxed{B} is a guess` is an A."""
    boxed = last_boxed(text)
    text = boxed if boxed is not None else text
    letters = re.findall(r"\b(A|B|C|D)\b", text.upper())
    return (letters[-1] if letters else text.strip().strip(".")).rstrip(".").rstrip("/")


def check_gpqa(record, response):
    """GPQA, MMLU-Redux and the built-in science_boxed: the letter, graded by `answer_letter`."""
    return float(answer_letter(response) == str(record["answer"]).strip()), ""


# TOOLUSE. Names are read the release's way (`Action:` then optional spaces or newlines, any order with
# the inputs): `Action: X.`, the name on the next line, `Action: X Action Input: {...}` on one line.
# We read the whole name up to a space or '(' (the release's \w+ can never match `[Optional]foo`).
ACTION = re.compile(r"Action:\s*([^\s(]+)")
ACTION_INPUT = re.compile(r"Action Input:\s*(?=\{)")
# JSON is decoded from bounded slices, at most so many times a response: a 1 MB response cost 14–24 s when each
# failed decode counted the newlines from the response's start (round six)
MAX_JSON_CHARS, MAX_JSON_READS = 16384, 64


def action_names(response):
    return [m.group(1).rstrip(".,;:") for m in ACTION.finditer(response)]


def action_inputs(response):
    """The JSON objects that follow `Action Input:`, whole (nested braces fine: the release's non-greedy
    {.*?} cuts them). One that is not JSON is skipped, as in the release."""
    found = []
    for n, m in enumerate(ACTION_INPUT.finditer(response)):
        if n == MAX_JSON_READS:
            break
        try:   # (a bounded slice: a failed decode's message counts the lines before it, from the slice's start)
            obj, _ = json.JSONDecoder().raw_decode(response[m.end():m.end() + MAX_JSON_CHARS])
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def merged(dicts):
    out = {}
    for d in dicts:
        out.update(d)
    return out


def reference_calls(record):
    """The reference's action names and its merged inputs (a list of {"Action", "Action_Input"})."""
    ref = json.loads(record["answer"]) if isinstance(record["answer"], str) else record["answer"]
    inputs = []
    for a in ref:
        inp = a.get("Action_Input", "{}")
        try:
            inputs.append(json.loads(inp) if isinstance(inp, str) else inp)
        except ValueError:
            inputs.append({})
    return [a["Action"] for a in ref], merged(i for i in inputs if isinstance(i, dict))


def check_tooluse(record, response):
    """TOOLUSE: the multiset of action names equals the reference's, and the merged inputs equal the
    merged reference inputs (so an omitted `Action Input` is right when the reference's is {})."""
    ref_names, ref_input = reference_calls(record)
    names, inputs = action_names(response), merged(action_inputs(response))
    names_ok, inputs_ok = Counter(names) == Counter(ref_names), inputs == ref_input
    notes = ([] if names_ok else [f"Actions mismatch: predicted {names}, expected {ref_names}"]) + \
        ([] if inputs_ok else [f"Action inputs mismatch: predicted {inputs}, expected {ref_input}"])
    return float(names_ok and inputs_ok), "; ".join(notes)


# Where the program is in a response depends on the data's format (a record's "code_format"):
#   "fenced" (the release's data, and any record that does not say): the longest ```-fenced block of any
#            language, as the release's feedback/code.py `extract_code`; none is "Incorrect Format", score 0.
#   "lambda" (the built-in world's own answer format): the bare text after any thinking trace, which the
#            world's answers are (`lambda x: (x+3)*2`); a text with no lambda in it is its "Incorrect Format".
INCORRECT_FORMAT = {"fenced": "Incorrect Format: Put your code inside a ```python ... ``` block.",
                    "lambda": "Incorrect Format: Answer with a Python lambda of x, like `lambda x: x + 1`."}


def code_format(record):
    return record.get("code_format") or "fenced"


def extract_code(response, fmt="fenced"):
    """The program in a response under the data's format (code_format above), or None when it has
    none; a thinking model's trace (everything up to the last `</think>`) is never part of it."""
    if fmt == "lambda":
        return response.rsplit("</think>", 1)[-1].strip()
    blocks = fenced_blocks(response)
    return max(blocks, key=len).strip() if blocks else None


def has_program(program, fmt):
    """Is there a program in the data's format? Fenced: a block was found; lambda: the text has one
    (`lambda x: x+3`, or a program that defines one, `f = lambda x: x+3`)."""
    return program is not None and (fmt != "lambda" or "lambda" in program)


def fenced_blocks(response):
    """The ```-fenced blocks (any language) after a thinking model's trace (up to the last `</think>`)."""
    return re.findall(r"```\w*\n(.*?)```", response.rsplit("</think>", 1)[-1], flags=re.S)


def code_feedback(program, fmt, tests, outcomes):
    """(S8) The release's LeetCode-style report on a failed program: the first runtime error or time-out
    with its input, else the two shortest wrong answers with input, output and expected output; a
    response with no program in the data's format gets that format's "Incorrect Format" line.

    Example (the built-in world, f = x + 3 on the points -3, -1, …): `lambda x: x+4` ->
    "Test Case 1: Wrong Answer\n\nInput\n[-3]\n\nOutput\n1\n\nExpected\n0\n\nTest Case 2: …"."""
    if tests is None:
        return "Failed to parse ground truth test cases."
    if not has_program(program, fmt):
        return INCORRECT_FORMAT[fmt]
    if outcomes is None:
        return "Failed to parse ground truth test cases."
    inputs, expected = tests["inputs"], tests["outputs"]
    shown = lambda x: "\n".join(str(x).splitlines()[:8])[:250]   # noqa: E731 (the release's limits)
    for k, out in enumerate(outcomes):
        if out[0] == "error":
            return f"Runtime Error\n{out[1]}\n\nLast Executed Input\n{shown(inputs[k])}"
        if out[0] == "timeout":
            return f"Time Limit Exceeded\n\nLast Executed Input\n{shown(inputs[k])}"
    passed = getattr(outcomes, "passed", None)   # (judged once by the sandbox, under its deadline)
    wrong = [k for k, out in enumerate(outcomes) if not (passed[k] if passed else passed_test(out, tests, k))]
    wrong = sorted(wrong, key=lambda k: len(str(inputs[k])) + len(str(outcomes[k][1:])))[:2]
    return "\n\n".join(f"Test Case {k + 1}: Wrong Answer\n\nInput\n{shown(inputs[k])}\n\nOutput\n"
                       f"{str(outcomes[k][1]).strip()[:250]}\n\nExpected\n{str(expected[k]).strip()[:250]}"
                       for k in wrong)[:2000]


def check_code_many(records, responses):
    """CODING, a batch: each program runs in the sandbox against its record's tests (two at a time);
    (score, feedback) per response. The release's data is graded by the release's rules: a fenced block,
    and the test's function looked up at the top level only (no `Solution().name`)."""
    fmts = [code_format(rec) for rec in records]
    programs = [extract_code(resp, fmt) for resp, fmt in zip(responses, fmts)]
    jobs = [(program if has_program(program, fmt) else None, code_tests(rec, fmt))
            for program, fmt, rec in zip(programs, fmts, records)]
    results = run_programs_detailed(jobs)
    return [(score, "" if score == 1.0 else code_feedback(program, fmt, parse_tests(rec.get("tests") or "{}"), outcomes))
            for (score, outcomes), rec, program, fmt in zip(results, records, programs, fmts)]


def code_tests(record, fmt):
    """A record's tests as the sandbox takes them: under the release's format, with its function lookup
    (by name, else the first top-level `def`; never a `Solution` method)."""
    tests = record.get("tests") or "{}"
    if fmt != "fenced":
        return tests
    parsed = parse_tests(tests)
    return tests if parsed is None else {**parsed, "lookup": "release"}


def check_code(record, response):
    return check_code_many([record], [response])[0]


# BFCL v4 (multiple) has no grader in the release: this one follows BFCL's own AST checker — the right
# function, every required parameter, no parameter outside the possible answers, and each value one
# of its possible answers (strings compared lower-cased without spaces and ,./-_*^ punctuation; an
# int is accepted for a float; "" among the possible answers marks a parameter that may be left out).
def bfcl_text(s):
    return re.sub(r"[ ,./\-_*^]", "", s).lower()


def bfcl_value_ok(got, allowed):
    if isinstance(allowed, str):
        return isinstance(got, str) and bfcl_text(got) == bfcl_text(allowed)
    if isinstance(allowed, bool) or isinstance(got, bool):
        return got is allowed
    if isinstance(allowed, (int, float)):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and got == allowed \
            and not (isinstance(allowed, int) and isinstance(got, float) and not got.is_integer())
    if isinstance(allowed, list):
        return isinstance(got, list) and len(got) == len(allowed) and all(map(bfcl_value_ok, got, allowed))
    if isinstance(allowed, dict):
        return isinstance(got, dict) and got.keys() == allowed.keys() and all(
            any(bfcl_value_ok(got[k], a) for a in (v if isinstance(v, list) else [v])) for k, v in allowed.items())
    return got == allowed


def bfcl_call_ok(name, args, truth, functions):
    """One call against one ground-truth entry {function name: {param: [possible values]}}."""
    (want, params), = truth.items()
    if name not in (want, want.replace(".", "_")) or not isinstance(args, dict):
        return False
    spec = next((f for f in functions if f.get("name") == want), {})
    required = (spec.get("parameters") or {}).get("required") or []
    if any(p not in args for p in required) or any(p not in params for p in args):
        return False
    for p, allowed in params.items():
        if p not in args:
            if "" not in allowed:
                return False
        elif not any(bfcl_value_ok(args[p], a) for a in allowed if a != ""):
            return False
    return True


def check_bfcl(record, response):
    """BFCL, answered in the TOOLUSE format: the calls, in order, each right by `bfcl_call_ok`."""
    truth = json.loads(record["answer"])
    functions = json.loads(record.get("tests") or "[]")
    names, inputs = action_names(response), action_inputs(response)
    ok = len(names) == len(truth) == len(inputs) and all(
        bfcl_call_ok(n, a, t, functions) for n, a, t in zip(names, inputs, truth))
    return float(ok), "" if ok else f"Your function calls were incorrect (you called: {', '.join(names) or 'none'})."


# ZebraLogic has no grader in the release either: the benchmark's own definition — the JSON grid of the
# answer, every cell right (puzzle accuracy; cells compared lower-cased and stripped).
def last_json_object(text, tries=2000):
    """The last whole JSON object in the text: objects are read left to right, each from a '{' where
    one parses to its end (at most `tries` attempts, so junk full of braces stays cheap)."""
    found, i = None, text.find("{")
    while i >= 0 and tries > 0:
        tries -= 1
        try:
            obj, end = json.JSONDecoder().raw_decode(text[i:i + MAX_JSON_CHARS])
            if isinstance(obj, dict):
                found = obj
            i = text.find("{", i + end)
        except (json.JSONDecodeError, RecursionError):
            i = text.find("{", i + 1)
    return found


def check_zebralogic(record, response):
    solution = json.loads(record["answer"])           # {"House 1": {"Name": "Eric", ...}, ...}
    got = last_json_object(response)
    got = got.get("solution", got) if isinstance(got, dict) else None
    if not isinstance(got, dict):
        return 0.0, "Your response did not contain the solution as a JSON object."
    cell = lambda v: str(v).strip().lower()   # noqa: E731
    right = all(isinstance(got.get(house), dict) and all(cell(got[house].get(attr, "")) == cell(v) for attr, v in row.items())
                for house, row in solution.items())
    return float(right), ""


CHECKS = {"math": check_math, "mcq": check_mcq, "gpqa": check_gpqa, "tooluse": check_tooluse,
          "code": check_code, "bfcl": check_bfcl, "zebralogic": check_zebralogic}


def check(record, response):
    """(score, feedback) for one response. Never raises: a malformed record or answer scores 0."""
    try:
        score, note = CHECKS[record["kind"]](record, response)
        return float(score), note
    except Exception:  # a grader bug must not kill a training run; a malformed answer is wrong
        return 0.0, ""


def grade(record, response):
    """Grade one response to one record (built-in or release format): 1.0 right, 0.0 wrong. Never raises."""
    return check(record, response)[0]


def feedback(record, response):
    """(S8) What the environment says about a response, as the release's grader returns it beside the
    score; None when it says nothing (then SDPO has no teacher signal for that response).

    Example (math): "12" for answer 14 -> "Your answer had the wrong format. The solution must be given
    in the format: \\boxed{your_answer}."
    """
    return check(record, response)[1] or None


def check_many(records, responses):
    """(score, feedback) for each response of a batch, as `check` gives them; the programs run in the
    sandbox together (two at a time). Never raises."""
    out = [None] * len(records)
    code = [i for i, rec in enumerate(records) if rec.get("kind") == "code"]
    if code:
        try:
            results = check_code_many([records[i] for i in code], [responses[i] for i in code])
        except Exception:  # a malformed tests field: wrong, as check() would say
            results = [(0.0, "")] * len(code)
        for i, result in zip(code, results):
            out[i] = result
    return [r if r is not None else check(rec, resp) for r, rec, resp in zip(out, records, responses)]


def grade_many(records, responses):
    """Grade a batch: 1.0 right, 0.0 wrong per response (check_many's scores)."""
    return [score for score, _ in check_many(records, responses)]
