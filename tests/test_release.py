"""The release's record format on real records (copies of ../shared/data): loading and grading.

tests/data/release/tooluse_test.json       the release's TOOLUSE test file (48 records)
tests/data/release/sciknoweval_chemistry_test.json   SciKnowEval chemistry test file (210 MCQ records)
"""
import json
import os

import pytest

from world import tasks
from world import graders

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "release")
TOOLUSE = os.path.join(DATA, "tooluse_test.json")
CHEM = os.path.join(DATA, "sciknoweval_chemistry_test.json")


def tool_calls(record):
    """The reference calls as (name, input dict)."""
    return [(a["Action"], json.loads(a["Action_Input"]) if isinstance(a["Action_Input"], str) else a["Action_Input"])
            for a in json.loads(record["answer"])]


def tool_response(calls, thought="I should call the tool."):
    """A response in the format the TOOLUSE prompt asks for: Thought / Action / Action Input per call."""
    return "\n".join(f"Thought: {thought}\nAction: {name}\nAction Input: {json.dumps(inp)}" for name, inp in calls)


def mcq_response(letter):
    """The format the SciKnowEval system message asks for."""
    return f"<reasoning>\nThe product's scaffold matches.\n</reasoning>\n<answer>\n{letter}\n</answer>"


def test_load_release_files():
    tools, chem = tasks.load_records(TOOLUSE), tasks.load_records(CHEM)
    assert len(tools) == 48 and {r["kind"] for r in tools} == {"tooluse"}
    assert len(chem) == 210 and {r["kind"] for r in chem} == {"mcq"}
    assert {r["answer"] for r in chem} == {"A", "B", "C", "D"}
    assert all("Action Input" in r["prompt"] for r in tools)


def test_every_tooluse_reference_grades_one():
    for r in tasks.load_records(TOOLUSE):
        assert graders.grade(r, tool_response(tool_calls(r))) == 1.0, r["idx"]
        # the Thought lines and a Final Answer after the calls do not matter
        assert graders.grade(r, tool_response(tool_calls(r), "hm") + "\nFinal Answer: done") == 1.0


def perturbations(calls):
    """Wrong tool, wrong argument value, missing argument, extra call, missing input, no action at all.

    Argument perturbations go to the *last* call: the release's grader compares the merged inputs of
    all calls (dict.update in order), so a key repeated by a later call hides an earlier call's value.
    """
    name, inp = calls[-1]
    out = {"wrong tool": calls[:-1] + [(name + "X", inp)],
           "extra call": calls + [calls[0]],
           "no action": []}
    if inp:
        key = sorted(inp)[0]
        out["wrong value"] = calls[:-1] + [(name, {**inp, key: f"{inp[key]}-other"})]
        out["missing argument"] = [(n, {k: v for k, v in i.items() if k != key}) for n, i in calls]
    else:
        out["invented argument"] = calls[:-1] + [(name, {"q": "x"})]
    if len(calls) > 1:
        out["missing call"] = calls[:-1]
    return out


def test_tooluse_perturbations_grade_zero():
    seen = set()
    for r in tasks.load_records(TOOLUSE):
        for what, calls in perturbations(tool_calls(r)).items():
            assert graders.grade(r, tool_response(calls)) == 0.0, (r["idx"], what)
            seen.add(what)
        # an Action without its Action Input, and an Action Input that is not JSON
        # an Action without its Action Input, or with one that is not JSON: right exactly when the
        # reference's inputs are all {} (the release merges the inputs it can read)
        calls = tool_calls(r)
        if len(calls) == 1:
            name, inp = calls[0]
            assert graders.grade(r, f"Action: {name}\n") == float(inp == {})
            assert graders.grade(r, f"Action: {name}\nAction Input: {{not json}}") == float(inp == {})
    assert {"wrong tool", "extra call", "wrong value", "missing argument", "missing call"} <= seen


def test_every_mcq_reference_grades_one_and_perturbations_zero():
    for r in tasks.load_records(CHEM):
        right = r["answer"]
        wrong = next(x for x in "ABCD" if x != right)
        assert graders.grade(r, mcq_response(right)) == 1.0
        assert graders.grade(r, f"<answer>{right}</answer>") == 1.0
        assert graders.grade(r, mcq_response(wrong)) == 0.0                         # wrong letter
        assert graders.grade(r, right) == 1.0                                       # a bare letter (the release's rule)
        assert graders.grade(r, f"<answer>\n{right}\n") == 1.0                      # unclosed tag (likewise)
        assert graders.grade(r, f"The answer is {right}") == 0.0
        assert graders.grade(r, f"<answer>{right}</answer> no, <answer>{wrong}</answer>") == 0.0  # the last one counts
        assert graders.grade(r, f"<answer>{right}: the first option</answer>") == 0.0


@pytest.mark.parametrize("path", [TOOLUSE, CHEM])
def test_release_files_as_a_training_task(path):
    """A release file is a task: tasks.train_records reads it as it is, with its kind's release rules added
    (SCIENCE's and TOOLUSE's: a warmup of 10 batches, no feedback, S8)."""
    records = tasks.train_records(path)
    assert [{k: v for k, v in r.items() if not k.startswith("release_")} for r in records] == tasks.load_records(path)
    assert all(r["release_warmup"] == 10 and r["release_feedback"] is False for r in records)
