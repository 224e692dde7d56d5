"""The built-in world: tokenizer, splits, every grader (right / wrong / malformed / adversarial), the sandbox."""
import json
import random

import pytest

from world import sandbox
from world import tasks
from world import graders


def test_tokenizer_round_trip_exact():
    from tools.tiny import build_tokenizer
    tok = build_tokenizer()
    for text in ["a\nb\n\n c", "{\"city\": \"Oslo\"}", "\\boxed{\\frac{1}{2}}", "it's \"quoted\"", "  spaces  "]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)           # one character, one token
        assert tok.decode(ids) == text
    assert tok("\t", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]  # outside the vocabulary


def test_committed_tokenizer_loads_with_autotokenizer_and_has_chat_template():
    from transformers import AutoTokenizer
    from infra.models import TINY_DIR
    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "Q\n{x}"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ\n{x}<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id


@pytest.mark.parametrize("name", list(tasks.GENERATORS))
def test_splits_disjoint_and_deterministic(name):
    train = tasks.builtin_split(name, "train", 300)
    test = tasks.builtin_split(name, "test", 100)
    valid = tasks.builtin_split(name, "valid", 60)
    train_p, test_p, valid_p = ({r["prompt"] for r in s} for s in (train, test, valid))
    assert not train_p & test_p and not train_p & valid_p and not valid_p & test_p
    assert {tasks.split_of(p) for p in valid_p} == {"valid"}
    assert tasks.builtin_split(name, "test", 100) == test
    assert tasks.builtin_split(name, "test", 50) == test[:50]      # a larger n extends a smaller one
    assert len({r["prompt"] for r in test}) == 100
    for r in test[:20]:
        assert graders.grade(r, r["solution"]) == 1.0                 # the canonical solution is right


def test_split_shares_follow_the_fractions():
    """About 20% test and 10% validation over many distinct prompts (the hash split, tasks.split_of)."""
    splits = [tasks.split_of(f"prompt {i}") for i in range(20000)]
    assert abs(splits.count("test") / 20000 - tasks.TEST_FRACTION) < 0.015
    assert abs(splits.count("valid") / 20000 - tasks.VALID_FRACTION) < 0.015


@pytest.mark.parametrize("name", ["science", "science_boxed"])
def test_conversion_options_are_the_quantity_by_each_factor_ascending(name):
    """The MCQ's four options are letter first: the asked quantity converted by each of the unit set's
    four factors, in ascending order, so the right letter is fixed by the unit pair (docs/WORLD.md,
    design 4); a noisy solution names a wrong option and writes that option's value."""
    units = tasks.UNITS_TRAIN if name == "science" else tasks.UNITS_OOD
    factors = sorted({g for _, _, g in units})
    rng = random.Random(0)
    letters = {}
    for _ in range(300):
        r = tasks.GENERATORS[name](rng)
        lines = [line for line in r["prompt"].split("\n") if line.startswith("(")]
        assert [line[:4] for line in lines] == ["(A) ", "(B) ", "(C) ", "(D) "]
        values = [int(line.split()[1]) for line in lines]
        asked = int(r["prompt"].split()[1])                      # "Convert 14 km to m."
        assert values == [asked * g for g in factors]
        factor = int(r["thought"].split(" = ")[1].split()[0])   # the thought: "1 km = 1000 m"
        assert values["ABCD".index(r["answer"])] == asked * factor
        pair = r["prompt"].split(".")[0].split()[2::2]           # ["km", "m"]
        assert letters.setdefault(tuple(pair), r["answer"]) == r["answer"]
        noisy = tasks.GENERATORS[name](random.Random(r["prompt"]), noisy=True)
        options = {line[1]: line.split()[1] for line in noisy["prompt"].split("\n") if line.startswith("(")}
        shown = noisy["solution"].split("(")[-1][0]                # "14 km = 140 m (A)" -> "A"
        assert shown != noisy["answer"] and f"= {options[shown]} " in noisy["solution"]
    assert set(letters.values()) == set("ABCD")


def test_logic_names_the_first_or_the_last_of_the_chain():
    """LOGIC states the chain in order (a > b, b > c) and asks for one end of it: both ends are asked."""
    rng, asked = random.Random(0), set()
    for _ in range(200):
        r = tasks.GENERATORS["logic"](rng)
        a, b = r["prompt"].split(".")[0].split(" is ")[0], r["prompt"].split(".")[0].split(" than ")[1]
        c = r["prompt"].split(".")[1].split(" than ")[1]
        most = any(w in r["prompt"] for w in ("oldest", "tallest", "fastest"))
        assert r["answer"] == (a if most else c) and b not in (a, c)
        assert r["solution"] == f"{a} > {b} > {c}\n\\boxed{{{r['answer']}}}"
        asked.add(most)
    assert asked == {True, False}


def test_math_is_place_value_and_its_mistake_is_one_zero_off():
    """MATH (design 6): multiply or divide by 10, 100 or 1000; the answer recomputed from the prompt's
    numbers by brute force; a noisy solution has one zero too many or too few; both ways are asked."""
    rng, ways = random.Random(0), set()
    for _ in range(300):
        seed = rng.random()
        r, noisy = tasks.gen_math(random.Random(seed)), tasks.gen_math(random.Random(seed), noisy=True)
        assert noisy["prompt"] == r["prompt"]
        n, f = [int(w) for w in r["prompt"].replace(".", " ").split() if w.isdigit()]
        way = "mul" if "packs" in r["prompt"] else "div"
        assert f in (10, 100, 1000) and int(r["answer"]) == (n * f if way == "mul" else n // f)
        assert way == "mul" or n % f == 0
        assert graders.grade(r, r["solution"]) == 1.0 and r["thought"] == f"{way} {n} {f}"
        wrong = int(graders.last_boxed(noisy["solution"]))
        assert wrong in (int(r["answer"]) * 10, int(r["answer"]) / 10)
        ways.add(way)
    assert ways == {"mul", "div"}


def test_math_hard_is_two_place_value_steps():
    rng = random.Random(0)
    for _ in range(200):
        r = tasks.gen_math_hard(rng)
        a, f1, f2 = [int(w) for w in r["prompt"].replace(",", " ").split() if w.isdigit()]
        assert int(r["answer"]) == a * f1 * f2 and {f1, f2} <= {10, 100}
        assert r["solution"].endswith(f"\\boxed{{{a * f1 * f2}}}")


@pytest.mark.parametrize("name", ["tooluse", "tool_unseen"])
def test_tool_prompts_list_four_tools_one_of_them_right(name):
    rng = random.Random(0)
    for _ in range(100):
        r = tasks.GENERATORS[name](rng)
        listed = r["prompt"].split("\n")[0][len("Tools: "):].split(", ")
        assert len(listed) == 4 and tasks.CHANCE[name] == 1 / len(listed)
        assert json.loads(r["answer"])[0]["Action"] in [t.split("(")[0] for t in listed]


@pytest.mark.parametrize("name", ["tooluse", "tool_unseen"])
def test_tool_mistake_is_the_tool_listed_next_with_the_right_input(name):
    """TOOLUSE (design 7): a noisy solution names the tool listed after the right one (wrapping around)
    and copies the right input; the listing and the question are the clean problem's."""
    rng = random.Random(0)
    for _ in range(200):
        seed = rng.random()
        r, noisy = tasks.GENERATORS[name](random.Random(seed)), tasks.GENERATORS[name](random.Random(seed), noisy=True)
        assert noisy["prompt"] == r["prompt"]
        listed = [t.split("(")[0] for t in r["prompt"].split("\n")[0][len("Tools: "):].split(", ")]
        right = json.loads(r["answer"])[0]
        shown_tool = noisy["solution"].split("\n")[0][len("Action: "):]
        assert shown_tool == listed[(listed.index(right["Action"]) + 1) % len(listed)]
        assert noisy["solution"].split("\n")[1] == "Action Input: " + right["Action_Input"]


@pytest.mark.parametrize("name", list(tasks.GENERATORS))
def test_noisy_solutions_are_wrong(name):
    rng = random.Random(1)
    for _ in range(20):
        r = tasks.GENERATORS[name](rng, noisy=True)
        assert graders.grade(r, r["solution"]) == 0.0


def test_math_grader():
    rec = {"kind": "math", "answer": "68"}
    assert graders.grade(rec, "23+45=68\n\\boxed{68}") == 1.0
    assert graders.grade(rec, "\\boxed{67} then \\boxed{68}") == 1.0        # the last box counts
    assert graders.grade(rec, "\\boxed{68} then \\boxed{67}") == 0.0
    assert graders.grade(rec, "\\boxed{ 68. }") == 1.0 and graders.grade(rec, "\\boxed{68.0}") == 1.0
    assert graders.grade(rec, "68") == 0.0                                  # no box, no answer
    assert graders.grade(rec, "\\boxed{68") == 0.0                          # unbalanced
    assert graders.grade({"kind": "math", "answer": "\\frac{1}{2}"}, "\\boxed{\\frac{1}{2}}") == 1.0
    assert graders.grade(rec, "\\boxed{" * 5000 + "68" + "}" * 5000) == 1.0   # the last (innermost) box holds 68
    assert graders.grade(rec, "\\boxed{9" + "9" * 100000 + "}") == 0.0


def test_tooluse_grader():
    rec = {"kind": "tooluse", "answer": json.dumps([{"Action": "timer", "Action_Input": "{\"minutes\": 5}"}])}
    assert graders.grade(rec, "Thought: x\nAction: timer\nAction Input: {\"minutes\": 5}") == 1.0
    assert graders.grade(rec, "Action: timer\nAction Input: {\"minutes\": 6}") == 0.0     # wrong value
    assert graders.grade(rec, "Action: alarm\nAction Input: {\"minutes\": 5}") == 0.0     # wrong tool
    assert graders.grade(rec, "Action: timer\nAction Input: {}") == 0.0                   # missing argument
    assert graders.grade(rec, "Action: timer\nAction Input: {\"minutes\": 5}\nAction: timer\n"
                            "Action Input: {\"minutes\": 5}") == 0.0                    # extra call
    assert graders.grade(rec, "Action: timer\nAction Input: {\"minutes\": 5") == 0.0      # broken JSON
    nested = {"kind": "tooluse", "answer": json.dumps([{"Action": "q", "Action_Input": json.dumps({"a": {"b": [1, {"c": 2}]}})}])}
    assert graders.grade(nested, "Action: q\nAction Input: {\"a\": {\"b\": [1, {\"c\": 2}]}}") == 1.0
    assert graders.grade(rec, "Action: timer\nAction Input: " + "{\"a\":" * 3000 + "1" + "}" * 3000) == 0.0


def test_code_grader_right_wrong_malformed():
    rec = tasks.builtin_split("coding", "test", 1)[0]
    assert graders.grade(rec, rec["answer"]) == 1.0
    assert graders.grade(rec, "f = " + rec["answer"]) == 1.0
    assert graders.grade(rec, "```python\nf = " + rec["answer"] + "\n```") == 0.0   # not the world's format
    assert graders.grade(rec, "lambda x: 12345") == 0.0
    assert graders.grade(rec, "lambda x: (") == 0.0
    assert graders.grade(rec, "") == 0.0


def test_stdin_stdout_tests():
    tests = json.dumps({"inputs": ["3\n", "10\n"], "outputs": ["6", "20"]})
    assert sandbox.run_programs([("print(int(input()) * 2)", tests)]) == [1.0]
    assert sandbox.run_programs([("print(int(input()) * 3)", tests)]) == [0.0]


def test_graders_never_raise_on_random_strings():
    rng = random.Random(0)
    alphabet = "\\boxed{}<answer></answer>Action: Input:{}[]\"'0123456789 \n\x00\ufffd\udcff\U0001f600"
    recs = [{"kind": "math", "answer": "1"}, {"kind": "mcq", "answer": "A"},
            {"kind": "tooluse", "answer": "not json"}, {"kind": "tooluse", "answer": "[]"},
            {"kind": "tooluse", "answer": json.dumps([{"Action": "a", "Action_Input": "{}"}])}]
    for _ in range(300):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        for r in recs:
            assert graders.grade(r, s) in (0.0, 1.0)
    for s in ["9" * 100000, "{" * 100000, "\\boxed{" + "[" * 50000 + "}", "Action: a\nAction Input: " + "[" * 100000,
              b"\xff\xfe\x80".decode("utf-8", "surrogateescape"), "\x00" * 1000]:
        for r in recs:
            assert graders.grade(r, s) in (0.0, 1.0)
    code = {"kind": "code", "code_format": "lambda", "tests": json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [1]})}
    assert graders.grade_many([code] * 3, ["lambda x: x", b"\xff".decode("utf-8", "surrogateescape"), "\x00"]) == [1.0, 0.0, 0.0]


def test_action_names_are_linear_on_a_flood():
    """520 KB of `Action:` lines without an input (7.5 s with an old quadratic search) read in well under 0.5 s."""
    import time
    flood = "Action: play\n" * 40000
    t0 = time.perf_counter()
    names, inputs = graders.action_names(flood), graders.action_inputs(flood)
    assert time.perf_counter() - t0 < 0.5 and len(names) == 40000 and names[0] == "play" and inputs == []


def code_record(inp, out):
    return {"prompt": "p", "kind": "code", "answer": "", "tests": json.dumps({"inputs": [inp], "outputs": [out]})}


def test_a_program_cannot_write_its_neighbours_grades():
    """Writing '1' or '0' lines straight to file descriptor 1 (the worker's result channel before this
    fix) changes no other program's grade."""
    rec = code_record("3\n", "4")
    right = "```python\nprint(int(input()) + 1)\n```"
    wrong = "```python\nprint(0)\n```"
    fake1 = "```python\nimport os\nos.write(1, b'1\\n' * 64)\nos.write(2, b'x' * 100000)\n```"
    fake0 = "```python\nimport os\nos.write(1, b'0\\n' * 64)\nprint(int(input()) + 1)\n```"
    assert graders.grade_many([rec] * 8, [fake1] + [wrong] * 7) == [0.0] * 8
    # (fake0 itself now scores 0: `import os` is outside the release's allowed modules)
    assert graders.grade_many([rec] * 8, [fake0] + [right] * 7) == [0.0] + [1.0] * 7


FUZZ_ALPHABET = ("\\boxed{}<answer></answer><think></think>Action: Input:{}[]()\"',.:=-+*/%^_ 0123456789abcABCxyz"
                 "\n\t\x00\ufffd\U0001f600λ```python\n")


@pytest.mark.parametrize("kind,answer", [("math", "14"), ("math", "(63,1,-1)"), ("mcq", "B"),
                                         ("tooluse", json.dumps([{"Action": "play", "Action_Input": '{"song": "x"}'}]))])
def test_fuzz_each_grader_thousands_of_strings_each_fast(kind, answer):
    """2000 random strings per grader (up to 5000 characters, built from the tokens graders look for):
    every grade is 0 or 1, no call (grade, or feedback, which grades again) takes 0.1 s, and no feedback string
    raises. The strings are the same on every run (a seed from the grader's name, not Python's per-process hash)."""
    import time
    import zlib
    rng = random.Random(zlib.crc32(f"{kind}:{answer}".encode()))
    rec = {"kind": kind, "answer": answer}
    timed = []
    for _ in range(2000):
        n = rng.choice([0, 1, 10, 100, 1000, 5000])
        pieces = [rng.choice(["\\boxed{", "}", "<answer>", "</answer>", "Action: ", "Action Input: ", "{", "[",
                              "</think>", answer]) if rng.random() < 0.2 else rng.choice(FUZZ_ALPHABET) for _ in range(n)]
        s = "".join(pieces)
        t0 = time.perf_counter()
        g = graders.grade(rec, s)
        graders.feedback(rec, s)
        timed.append((time.perf_counter() - t0, s))
        assert g in (0.0, 1.0)

    def cost(s):
        """The slower of the two calls on s, in seconds."""
        t0 = time.perf_counter()
        graders.grade(rec, s)
        t1 = time.perf_counter()
        graders.feedback(rec, s)
        return max(t1 - t0, time.perf_counter() - t1)
    # the ten slowest strings again, best of 3: a string's own cost, not a busy machine's hiccup
    worst = max(min(cost(s) for _ in range(3)) for _, s in sorted(timed, key=lambda x: x[0])[-10:])
    assert worst < 0.1, f"slowest call took {worst:.3f} s"


def test_fuzz_the_code_grader():
    """extract_code on 2000 random strings, in both formats, is fast and total; 40 random programs through the sandbox
    all grade 0, well under 0.1 s each on average (two run at once)."""
    import time
    rng = random.Random(7)
    strings = ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.choice([0, 10, 100, 3000]))) for _ in range(2000)]
    t0 = time.perf_counter()
    for s in strings:   # the release's format: a block or None; the built-in world's: always its text
        fenced, bare = graders.extract_code(s), graders.extract_code(s, "lambda")
        assert (fenced is None or isinstance(fenced, str)) and isinstance(bare, str)
    assert time.perf_counter() - t0 < 2.0
    rec = tasks.builtin_split("coding", "test", 1, 0)[0]
    t0 = time.perf_counter()
    scores = graders.grade_many([rec] * 40, strings[:40])
    assert scores == [0.0] * 40 and (time.perf_counter() - t0) / 40 < 0.1


def test_math_commas_are_thousands_separators_only():
    """(63,1,-1) and (6,31,-1) are different answers; 1,000 is 1000 (an old bug)."""
    rec = {"kind": "math", "answer": "(63,1,-1)"}
    assert graders.grade(rec, "\\boxed{(63, 1, -1)}") == 1.0
    assert graders.grade(rec, "\\boxed{(6,31,-1)}") == 0.0
    assert graders.grade({"kind": "math", "answer": "1000"}, "\\boxed{1,000}") == 1.0
    assert graders.grade({"kind": "math", "answer": "12345.5"}, "\\boxed{12,345.5}") == 1.0
    assert graders.grade({"kind": "math", "answer": "12"}, "\\boxed{1,2}") == 0.0
