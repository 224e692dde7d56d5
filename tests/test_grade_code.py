"""CODING grader (graders.check_code + world/sandbox.py): the release's rules (feedback/code.py) — the longest
fenced block of any language, output lines joined by spaces, LiveCodeBench's functional format, assert
tests, the release's allowed imports, its LeetCode-style feedback — and where we differ."""
import json

import pytest

from world import tasks
from world import graders


def rec(tests):
    return {"kind": "code", "answer": "", "tests": json.dumps(tests)}


STDIN = rec({"inputs": ["3\n", "4\n"], "outputs": ["6\n7", "8\n9"], "testtype": "stdin"})
LCB = rec({"fn_name": "maxSum", "testtype": "functional", "time_limit": 6,
           "inputs": ["[1, 2, 3]\n2", "[5, 1]\n1"], "outputs": ["5", "5"]})
ASSERTS = rec({"testtype": "code", "inputs": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], "outputs": [None, None]})


def fenced(code, lang="python"):
    return f"```{lang}\n{code}\n```"


def test_longest_block_of_any_language():
    right = "n = int(input())\nprint(2 * n)\nprint(2 * n + 1)"
    assert graders.grade(STDIN, "try this:\n" + fenced("print(0)") + "\nfinal:\n" + fenced(right, "py3")) == 1.0
    assert graders.grade(STDIN, fenced(right, "") + "\n" + fenced("print(0)")) == 1.0       # longest, not last
    assert graders.extract_code("```\nabc\n```\n```cpp\nlonger one\n```") == "longer one"


def test_output_lines_are_joined_by_spaces():
    """The release compares stripped output with newlines turned into spaces: `6 7` is `6\\n7`."""
    assert graders.grade(STDIN, fenced("n = int(input())\nprint(2 * n, 2 * n + 1)")) == 1.0
    assert graders.grade(STDIN, fenced("n = int(input())\nprint(2 * n, 2 * n + 1, end='  \\n\\n')")) == 1.0
    assert graders.grade(STDIN, fenced("n = int(input())\nprint(2 * n, '', 2 * n + 1)")) == 0.0   # two spaces


def test_livecodebench_functional_format():
    """Inputs are one JSON value per line (not split character by character, nor at every space as the
    release's `split()` does, which breaks `[1, 2, 3]`); outputs are JSON; the function is looked up as the
    release does: by name, else the first top-level def — a `class Solution` method is never found there."""
    cls = "class Solution:\n    def maxSum(self, nums, k):\n        return sum(sorted(nums)[-k:])"
    assert graders.grade(LCB, fenced(cls)) == 0.0    # the release scores LiveCodeBench's starter class 0
    assert graders.feedback(LCB, fenced(cls)).startswith("Runtime Error\n")
    assert graders.grade(LCB, fenced("def maxSum(nums, k):\n    return sum(sorted(nums)[-k:])")) == 1.0
    assert graders.grade(LCB, fenced("def other(nums, k):\n    return sum(sorted(nums)[-k:])")) == 1.0   # first def
    assert graders.grade(LCB, fenced("def maxSum(nums, k):\n    return 5.0")) == 1.0   # 5.0 == 5 (release: not)
    assert graders.grade(LCB, fenced("def maxSum(nums, k):\n    return [5]")) == 0.0


def test_typing_names_need_no_import():
    """The release's typing prelude (`feedback/code.py`: "Auto-import common typing aliases"): a correct,
    annotated LiveCodeBench answer scores 1 without `from typing import List` (it scored 0 before)."""
    typed = ("def maxSum(nums: List[int], k: int) -> Optional[int]:\n"
             "    seen: Dict[int, int] = {}\n    return sum(sorted(nums)[-k:])")
    assert graders.grade(LCB, fenced(typed)) == 1.0
    assert graders.grade(STDIN, fenced("x: List[int] = [int(input())]\nprint(2 * x[0])\nprint(2 * x[0] + 1)")) == 1.0
    assert graders.grade(ASSERTS, fenced("def add(a: Any, b: Any) -> Any:\n    return a + b")) == 1.0
    assert graders.grade(LCB, fenced("def maxSum(nums: Frobnicate[int], k):\n    return 5")) == 0.0   # only its names


def test_assert_tests():
    assert graders.grade(ASSERTS, fenced("def add(a, b):\n    return a + b")) == 1.0
    assert graders.grade(ASSERTS, fenced("def add(a, b):\n    return a - b")) == 0.0


@pytest.mark.parametrize("module,ok", [("heapq", True), ("collections", True), ("decimal", True), ("statistics", True),
                                       ("os", False), ("subprocess", False), ("pathlib", False), ("numpy", False)])
def test_the_release_allowed_imports(module, ok):
    """The release's allow list; numpy is on it but outside the standard library the sandbox sees."""
    code = f"import {module}\ndef add(a, b):\n    return a + b"
    assert graders.grade(ASSERTS, fenced(code)) == float(ok)


def test_no_open_and_time_limit():
    assert graders.grade(ASSERTS, fenced("open('x')\ndef add(a, b):\n    return a + b")) == 0.0
    slow = rec({"testtype": "code", "inputs": ["assert f()"], "outputs": [None], "time_limit": 1})
    assert graders.grade(slow, fenced("def f():\n    while True: pass")) == 0.0


def test_the_data_format_decides_where_the_program_is():
    """The release's data (and any record that does not say): only a fenced block is a program, so a
    correct bare program scores 0 with "Incorrect Format", as in the release. The built-in world's
    format is the bare lambda: a fenced block is not its format, nor is a text that is no lambda."""
    right = "def maxSum(nums, k):\n    return sum(sorted(nums)[-k:])"
    assert graders.grade(LCB, right) == 0.0
    assert graders.feedback(LCB, right) == graders.INCORRECT_FORMAT["fenced"]
    assert graders.grade(LCB, fenced(right)) == 1.0
    world = {**rec({"fn_name": "f", "inputs": [[-3], [0], [5]], "outputs": [0, 3, 8]}), "code_format": "lambda"}
    assert graders.grade(world, "lambda x: x+3") == 1.0
    assert graders.grade(world, "lambda x: x+3</think>lambda x: x+3") == 1.0       # after the trace
    assert graders.grade(world, fenced("lambda x: x+3")) == 0.0
    assert graders.feedback(world, "x+3") == graders.INCORRECT_FORMAT["lambda"]


def test_the_built_in_world_gets_a_true_report():
    """(S8) The built-in world's typical failures, reported as the release reports a fenced program's: a
    wrong lambda gets its two shortest wrong tests, a crashing one its error and input, a degenerate
    loop that is no lambda "Incorrect Format" in the world's own words — never the fenced-block lie."""
    rng = __import__("random").Random(3)
    record = tasks.gen_coding(rng)
    assert record["code_format"] == "lambda" and graders.grade(record, record["answer"]) == 1.0
    tests = json.loads(record["tests"])
    wrong = graders.feedback(record, "lambda x: x * 0 + 12345")
    first, second = sorted(range(len(tests["inputs"])), key=lambda k: len(str(tests["inputs"][k])) + 5)[:2]
    assert wrong == (f"Test Case {first + 1}: Wrong Answer\n\nInput\n{tests['inputs'][first]}\n\nOutput\n12345\n\n"
                     f"Expected\n{tests['outputs'][first]}\n\nTest Case {second + 1}: Wrong Answer\n\nInput\n"
                     f"{tests['inputs'][second]}\n\nOutput\n12345\n\nExpected\n{tests['outputs'][second]}")
    crash = graders.feedback(record, "lambda x: x // 0")
    assert crash == f"Runtime Error\nZeroDivisionError: integer division or modulo by zero\n\nLast Executed Input\n" \
                    f"{tests['inputs'][0]}"
    assert graders.feedback(record, "lambda x: (").startswith("Runtime Error\nSyntaxError: ")
    for missing in ("", "x+3", "ambdambdambda"):
        assert graders.feedback(record, missing) == graders.INCORRECT_FORMAT["lambda"]
    assert "```" not in "".join(graders.feedback(record, r) for r in ("", "lambda x: x // 0", "lambda x: 7"))


def test_feedback_strings():
    """The release's LeetCode-style report: the runtime error or time-out with its input, else the
    shortest wrong answers; no fenced block is 'Incorrect Format'."""
    assert graders.feedback(STDIN, "print(1)") == "Incorrect Format: Put your code inside a ```python ... ``` block."
    wrong = graders.feedback(STDIN, fenced("print(int(input()))"))
    assert wrong.startswith("Test Case 1: Wrong Answer\n\nInput\n3\n\nOutput\n3\n\nExpected\n6\n7")
    assert "Test Case 2: Wrong Answer" in wrong
    err = graders.feedback(STDIN, fenced("print(1 / 0)"))
    assert err == "Runtime Error\nZeroDivisionError: division by zero\n\nLast Executed Input\n3"
    slow = graders.feedback(STDIN, fenced("while True: pass"))
    assert slow == "Time Limit Exceeded\n\nLast Executed Input\n3"
    assert graders.feedback(STDIN, fenced("n = int(input())\nprint(2 * n)\nprint(2 * n + 1)")) is None


def test_out_of_cpu_seconds_is_a_time_out_too():
    """On a busy machine the CPU limit can strike before the wall clock: still 'Time Limit Exceeded'."""
    from world import sandbox
    tests = {"inputs": ["3\n"], "outputs": ["6"], "testtype": "stdin"}
    assert sandbox.run_programs_detailed([("while True: pass", tests)], limits={"wall": 10.0, "cpu": 1}) == \
        [(0.0, [["timeout"]])]
