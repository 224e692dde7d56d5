"""Judging is bounded like the program (round five): a program's returned values cannot make the grader's own checks
run for seconds. Each attack on c4c75d6 took 6–10 s in the grader (or hours); here each scores 0 quickly, and the
honest uses of the same checkers still pass."""
import json
import time

import pytest

from world import graders, sandbox


def rec(assert_line):
    return {"kind": "code", "answer": "", "tests": json.dumps({"testtype": "code", "inputs": [assert_line],
                                                               "outputs": [None]})}


def fenced(code):
    return f"```python\n{code}\n```"


COLLIDING = "import sys\nP = sys.hash_info.modulus\ndef f(x):\n    return [k * P for k in range(1, 20000)]"
ATTACKS = [
    ("Counter of colliding integers", "assert Counter(f(1)) == Counter('4')", COLLIDING),
    ("OrderedDict of colliding keys", "assert OrderedDict(f(1)) == OrderedDict()",
     "import sys\nP = sys.hash_info.modulus\ndef f(x):\n    return [[k * P, 1] for k in range(1, 20000)]"),
    ("int() of a huge Decimal", "assert int(f(1)) == 3",
     "from decimal import Decimal\ndef f(x):\n    return Decimal('1e400000')"),
    ("round() of a huge Decimal", "assert round(f(1)) == 3",
     "from decimal import Decimal\ndef f(x):\n    return Decimal('1e999999999')"),
    ("math.floor of a huge Decimal", "assert math.floor(f(1)) == 3",
     "from decimal import Decimal\ndef f(x):\n    return Decimal('1e400000')"),
    ("Fraction of a huge exponent's text", "assert Fraction(f(1)) == 3",
     "def f(x):\n    return '1e10000000'"),
]


@pytest.mark.parametrize("name,test,program", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_judging_attack_scores_0_quickly(name, test, program):
    t0 = time.monotonic()
    score, note = graders.check(rec(test), fenced(program))
    took = time.monotonic() - t0
    assert score == 0.0 and took < 5.0, (name, took)   # (the jail's start included; 6–10 s of judging before)


def test_many_sent_fractions_are_cheap_to_read():
    """42,000 sent Fractions once cost 2 s (10**4300 computed afresh for each): the limit is a constant now."""
    values = [{"$fraction": [1, 1]}] * 42000
    seconds = []
    for _ in range(3):   # the least of three: the cost itself, not what a busy machine adds (it failed at 0.61 s once
        t0 = time.monotonic()   # beside the suite's other worker)
        sandbox.untagged(values)
        seconds.append(time.monotonic() - t0)
    assert min(seconds) < 0.5


def test_the_judging_deadline_fails_the_tests_it_does_not_reach():
    tests = {"testtype": "code", "asserts": [sandbox.parse_asserts("assert f(1) == 1")] * 3, "outputs": [None] * 3}
    out = sandbox.judged_outcomes([["ok", [1]]] * 3, tests)
    assert out.passed == [True, True, True] and out == [["ok", [1]]] * 3
    assert sandbox.judged_outcomes([["ok", [1]]] * 3, tests, seconds=-1).passed == [False, False, False]


HONEST = [
    ("assert Counter(f('aab')) == Counter({'a': 2, 'b': 1})", "def f(s):\n    return list(s)"),
    ("assert OrderedDict(f(2)) == OrderedDict([(0, 0), (1, 1)])", "def f(n):\n    return [[i, i] for i in range(n)]"),
    ("assert int(f(1)) == 3", "from decimal import Decimal\ndef f(x):\n    return Decimal('3.2')"),
    ("assert round(f(1)) == 3", "from decimal import Decimal\ndef f(x):\n    return Decimal('2.7')"),
    ("assert Fraction(f(1)) == Fraction(1, 3)", "def f(x):\n    return '1/3'"),
    ("assert Fraction(f(1)) == 1000", "def f(x):\n    return '1e3'"),
    ("assert Decimal(f(1)) == Decimal('1e100')", "def f(x):\n    return '1e100'"),
]


@pytest.mark.parametrize("test,program", HONEST)
def test_honest_uses_of_the_same_checkers_still_pass(test, program):
    assert graders.grade(rec(test), fenced(program)) == 1.0


def test_the_feedback_reads_the_judged_verdicts_and_does_not_judge_again(monkeypatch):
    record = rec("assert f(1) == 2")
    calls = []
    real = sandbox.passed_test
    monkeypatch.setattr(sandbox, "passed_test", lambda *a: calls.append(1) or real(*a))
    score, note = graders.check(record, fenced("def f(x):\n    return 3"))
    assert score == 0.0 and "Wrong Answer" in note and len(calls) == 1


# Round six: a policy's answer is judged within about a second, on and off the main thread
HOSTILE_MATH = ["9^{9^{9^{9}}}", "10^{10^{10}}", "(10^{100})!", "9^{999999999}", "2^{2^{2^{2^{2}}}}", "99999!",
                "\\frac{1}{" * 300 + "}" * 300, "x" * 5000, "\\Gamma(10^{9})", "\\binom{10^{9}}{5000}", "((9!)!)!"]


@pytest.mark.parametrize("where", ["main", "thread"])
def test_hostile_math_answers_are_judged_within_a_second_each(where):
    import threading
    out = {}

    def grade():
        t0 = time.time()
        out["scores"] = [graders.check_math({"answer": "7"}, "\\boxed{" + h + "}")[0] for h in HOSTILE_MATH]
        out["seconds"] = time.time() - t0
    if where == "main":
        grade()
    else:
        t = threading.Thread(target=grade)
        t.start()
        t.join()
    assert out["scores"] == [0.0] * len(HOSTILE_MATH) and out["seconds"] < 1.0 * len(HOSTILE_MATH) / 4, out
    # an equivalent answer is still found by math-verify, on either thread
    right = {}
    check = lambda: right.setdefault("s", graders.check_math({"answer": "\\frac{14}{3}"}, "\\boxed{14/3}")[0])   # noqa: E731
    check() if where == "main" else (lambda t: (t.start(), t.join()))(threading.Thread(target=check))
    assert right["s"] == 1.0


def test_a_megabyte_of_json_junk_is_judged_quickly():
    junk = ("Action Input: {\"a\": [1, 2,\n" * 40000)[:1_000_000]
    t0 = time.time()
    graders.action_inputs(junk)
    graders.last_json_object("{\"a\": [1,\n" * 100000)
    assert time.time() - t0 < 2.0
    # an honest call still reads whole
    assert graders.action_inputs('Action: f\nAction Input: {"x": {"y": [1, 2]}}') == [{"x": {"y": [1, 2]}}]
    assert graders.last_json_object('junk {"House 1": {"Name": "Eric"}} tail') == {"House 1": {"Name": "Eric"}}
