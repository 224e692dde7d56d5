"""CODING grader (tasks.check_code + sandbox.py): the release's rules (feedback/code.py) — the longest
fenced block of any language, output lines joined by spaces, LiveCodeBench's functional format, assert
tests, the release's allowed imports, its LeetCode-style feedback — and where we differ."""
import json

import pytest

import tasks


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
    assert tasks.grade(STDIN, "try this:\n" + fenced("print(0)") + "\nfinal:\n" + fenced(right, "py3")) == 1.0
    assert tasks.grade(STDIN, fenced(right, "") + "\n" + fenced("print(0)")) == 1.0       # longest, not last
    assert tasks.extract_code("```\nabc\n```\n```cpp\nlonger one\n```") == "longer one"


def test_output_lines_are_joined_by_spaces():
    """The release compares stripped output with newlines turned into spaces: `6 7` is `6\\n7`."""
    assert tasks.grade(STDIN, fenced("n = int(input())\nprint(2 * n, 2 * n + 1)")) == 1.0
    assert tasks.grade(STDIN, fenced("n = int(input())\nprint(2 * n, 2 * n + 1, end='  \\n\\n')")) == 1.0
    assert tasks.grade(STDIN, fenced("n = int(input())\nprint(2 * n, '', 2 * n + 1)")) == 0.0   # two spaces


def test_livecodebench_functional_format():
    """Inputs are one JSON value per line (not split character by character, nor at every space as the
    release's `split()` does, which breaks `[1, 2, 3]`); outputs are JSON; a Solution class works."""
    cls = "class Solution:\n    def maxSum(self, nums, k):\n        return sum(sorted(nums)[-k:])"
    assert tasks.grade(LCB, fenced(cls)) == 1.0
    assert tasks.grade(LCB, fenced("def maxSum(nums, k):\n    return sum(sorted(nums)[-k:])")) == 1.0
    assert tasks.grade(LCB, fenced("def other(nums, k):\n    return sum(sorted(nums)[-k:])")) == 1.0   # first def
    assert tasks.grade(LCB, fenced("def maxSum(nums, k):\n    return 5.0")) == 1.0   # 5.0 == 5 (release: not)
    assert tasks.grade(LCB, fenced("def maxSum(nums, k):\n    return [5]")) == 0.0


def test_typing_names_need_no_import():
    """The release's typing prelude (`feedback/code.py`: "Auto-import common typing aliases"): a correct,
    annotated LiveCodeBench answer scores 1 without `from typing import List` (it scored 0 before)."""
    typed = ("class Solution:\n    def maxSum(self, nums: List[int], k: int) -> Optional[int]:\n"
             "        seen: Dict[int, int] = {}\n        return sum(sorted(nums)[-k:])")
    assert tasks.grade(LCB, fenced(typed)) == 1.0
    assert tasks.grade(STDIN, fenced("x: List[int] = [int(input())]\nprint(2 * x[0])\nprint(2 * x[0] + 1)")) == 1.0
    assert tasks.grade(ASSERTS, fenced("def add(a: Any, b: Any) -> Any:\n    return a + b")) == 1.0
    assert tasks.grade(LCB, fenced("def maxSum(nums: Frobnicate[int], k):\n    return 5")) == 0.0   # only its names


def test_assert_tests():
    assert tasks.grade(ASSERTS, fenced("def add(a, b):\n    return a + b")) == 1.0
    assert tasks.grade(ASSERTS, fenced("def add(a, b):\n    return a - b")) == 0.0


@pytest.mark.parametrize("module,ok", [("heapq", True), ("collections", True), ("decimal", True), ("statistics", True),
                                       ("os", False), ("subprocess", False), ("pathlib", False), ("numpy", False)])
def test_the_release_allowed_imports(module, ok):
    """The release's allow list; numpy is on it but outside the standard library the sandbox sees."""
    code = f"import {module}\ndef add(a, b):\n    return a + b"
    assert tasks.grade(ASSERTS, fenced(code)) == float(ok)


def test_no_open_and_time_limit():
    assert tasks.grade(ASSERTS, fenced("open('x')\ndef add(a, b):\n    return a + b")) == 0.0
    slow = rec({"testtype": "code", "inputs": ["assert f()"], "outputs": [None], "time_limit": 1})
    assert tasks.grade(slow, fenced("def f():\n    while True: pass")) == 0.0


def test_feedback_strings():
    """The release's LeetCode-style report: the runtime error or time-out with its input, else the
    shortest wrong answers; no fenced block is 'Incorrect Format'."""
    assert tasks.feedback(STDIN, "print(1)") == "Incorrect Format: Put your code inside a ```python ... ``` block."
    wrong = tasks.feedback(STDIN, fenced("print(int(input()))"))
    assert wrong.startswith("Test Case 1: Wrong Answer\n\nInput\n3\n\nOutput\n3\n\nExpected\n6\n7")
    assert "Test Case 2: Wrong Answer" in wrong
    err = tasks.feedback(STDIN, fenced("print(1 / 0)"))
    assert err == "Runtime Error\nZeroDivisionError: division by zero\n\nLast Executed Input\n3"
    slow = tasks.feedback(STDIN, fenced("while True: pass"))
    assert slow == "Time Limit Exceeded\n\nLast Executed Input\n3"
    assert tasks.feedback(STDIN, fenced("n = int(input())\nprint(2 * n)\nprint(2 * n + 1)")) is None


def test_out_of_cpu_seconds_is_a_time_out_too():
    """On a busy machine the CPU limit can strike before the wall clock: still 'Time Limit Exceeded'."""
    import sandbox
    tests = {"inputs": ["3\n"], "outputs": ["6"], "testtype": "stdin"}
    assert sandbox.run_programs_detailed([("while True: pass", tests)], limits={"wall": 10.0, "cpu": 1}) == \
        [(0.0, [["timeout"]])]
