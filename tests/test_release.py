"""The release's record format on real records (copies of ../shared/data): loading and grading.

tests/data/release/tooluse_test.json       the release's TOOLUSE test file (48 records)
tests/data/release/sciknoweval_chemistry_test.json   SciKnowEval chemistry test file (210 MCQ records)
"""
import json
import os

import pytest

import tasks
import train

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
        assert tasks.grade(r, tool_response(tool_calls(r))) == 1.0, r["idx"]
        # the Thought lines and a Final Answer after the calls do not matter
        assert tasks.grade(r, tool_response(tool_calls(r), "hm") + "\nFinal Answer: done") == 1.0


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
            assert tasks.grade(r, tool_response(calls)) == 0.0, (r["idx"], what)
            seen.add(what)
        # an Action without its Action Input, and an Action Input that is not JSON
        name, _ = tool_calls(r)[0]
        assert tasks.grade(r, f"Action: {name}\n") == 0.0
        assert tasks.grade(r, f"Action: {name}\nAction Input: {{not json}}") == 0.0
    assert {"wrong tool", "extra call", "wrong value", "missing argument", "missing call"} <= seen


def test_every_mcq_reference_grades_one_and_perturbations_zero():
    for r in tasks.load_records(CHEM):
        right = r["answer"]
        wrong = next(x for x in "ABCD" if x != right)
        assert tasks.grade(r, mcq_response(right)) == 1.0
        assert tasks.grade(r, f"<answer>{right}</answer>") == 1.0
        assert tasks.grade(r, mcq_response(wrong)) == 0.0                         # wrong letter
        assert tasks.grade(r, right) == 0.0                                       # missing tags
        assert tasks.grade(r, f"<answer>\n{right}\n") == 0.0                      # unclosed tag
        assert tasks.grade(r, f"<answer>{right}</answer> no, <answer>{wrong}</answer>") == 0.0  # the last one counts
        assert tasks.grade(r, f"<answer>{right}: the first option</answer>") == 0.0


@pytest.mark.parametrize("path", [TOOLUSE, CHEM])
def test_release_files_as_a_training_task(path):
    """A release file is a task: train.train_records reads it as it is."""
    assert train.train_records(path) == tasks.load_records(path)


# ---------------------------------------------------------------- hub datasets (adapters, no network)
FAKE_ROWS = {   # one row per dataset, shaped as its public card describes
    "dapo_math": {"prompt": [{"role": "user", "content": "Solve 2+3. Please output the final answer within \\boxed{}."}],
                  "reward_model": {"ground_truth": "5", "style": "rule"}, "data_source": "math"},
    "math500": {"problem": "What is $\\frac{1}{2}+\\frac{1}{2}$?", "answer": "1", "solution": "..."},
    "aime24": {"problem": "Find the remainder of 2024 by 7.", "answer": 1, "id": 1},
    "aime25": {"problem": "Find 10+5.", "answer": "15", "id": "1"},
    "sciknoweval_chemistry": {"question": "Which is a noble gas?", "type": "mcq-4-choices", "domain": "Chemistry",
                              "choices": {"text": ["Ne", "Na", "N", "Ni"], "label": ["A", "B", "C", "D"]},
                              "answerKey": "A"},
    "gpqa_diamond": {"Question": "Which particle is a lepton?", "Correct Answer": "electron",
                     "Incorrect Answer 1": "proton", "Incorrect Answer 2": "neutron", "Incorrect Answer 3": "pion"},
    "mmlu_redux": {"question": "2 + 2 = ?", "choices": ["3", "4", "5", "6"], "answer": 1},
    "livecodebench": {"question_content": "Read n and print 2n.",
                      "public_test_cases": json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}])},
}
RIGHT = {"dapo_math": "\\boxed{5}", "math500": "so \\boxed{1}", "aime24": "\\boxed{1}", "aime25": "\\boxed{15}",
         "sciknoweval_chemistry": "<answer>A</answer>", "mmlu_redux": "\\boxed{B}",
         "livecodebench": "```python\nprint(2 * int(input()))\n```"}


@pytest.mark.parametrize("name", sorted(FAKE_ROWS))
def test_hub_adapters_make_gradable_records(name):
    calls = []

    def fake_load_dataset(path, config, split):
        calls.append((path, config, split))
        return [FAKE_ROWS[name]]
    (rec,) = tasks.load_hub_task(f"hf:{name}", load_dataset=fake_load_dataset)
    assert calls == [tuple(tasks.HUB_TASKS[name][:3])]
    assert rec["kind"] in tasks.KINDS and isinstance(rec["prompt"], str)
    if name == "gpqa_diamond":   # the correct option is wherever the deterministic shuffle put it
        letter = rec["answer"]
        assert f"{letter}: electron" in rec["prompt"]
        right = f"\\boxed{{{letter}}}"
    else:
        right = RIGHT[name]
    assert tasks.grade(rec, right) == 1.0
    assert tasks.grade(rec, "\\boxed{wrong} <answer>Z</answer> print(0)") == 0.0


def test_hub_adapters_skip_rows_they_cannot_grade(capsys):
    rows = [FAKE_ROWS["livecodebench"],
            {"question_content": "class Solution...", "public_test_cases": json.dumps(
                [{"input": "[1]", "output": "1", "testtype": "functional"}])}]
    recs = tasks.load_hub_task("hf:livecodebench", load_dataset=lambda *a, **k: rows)
    assert len(recs) == 1 and "kept 1 of 2 rows" in capsys.readouterr().out
    other_domain = dict(FAKE_ROWS["sciknoweval_chemistry"], domain="Biology")
    with pytest.raises(ValueError, match="no usable records"):
        tasks.load_hub_task("hf:sciknoweval_chemistry", load_dataset=lambda *a, **k: [other_domain])


def test_unsupported_and_unknown_hub_tasks_have_clear_errors():
    with pytest.raises(ValueError, match="not yet supported"):
        tasks.check_task("hf:bfcl")
    with pytest.raises(ValueError, match="unknown hub task"):
        tasks.check_task("hf:nope")
    tasks.check_task("hf:math500")
    tasks.check_task(TOOLUSE)
