"""Every dataset of the release's docs/DATA.md: its adapter builds the release's prompt text exactly
(strings from the release's data/format/*.py, and the release's own SciKnowEval and ToolAlpaca
records rebuilt from rows shaped like the datasets), and its records grade with the release's grader.
Nothing is downloaded: `load_dataset` is replaced by rows shaped as each dataset's card describes."""
import base64
import json
import os
import pickle
import re
import zlib

import pytest

from world import graders, hub, tasks
from tools import prepare_data

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "release")


def fake_hub(rows):
    calls = []

    def load_dataset(path, config, split):
        calls.append((path, config, split))
        return rows
    return load_dataset, calls


def load(name, rows, spec=None):
    load_dataset, calls = fake_hub(rows)
    recs = hub.load_hub_task(spec or f"hf:{name}", load_dataset=load_dataset)
    assert calls == [tuple(hub.HUB_TASKS[name][:3])] or spec
    return recs


# ------------------------------------------------------------------ MATH: DAPO, AIME 24/25, Math500
def test_math_prompt_is_the_release_text():
    assert hub.PROMPT.format(problem="What is 1+1?") == (
        "What is 1+1?\n\nPlease reason step by step, and put your final answer within \\boxed{}.")


def test_dapo_math_trains_on_the_bare_problem():
    content = hub.DAPO_HEAD + "Find $x$ if $2x = 10$." + hub.DAPO_TAIL
    (rec,) = load("dapo_math", [{"prompt": [{"role": "user", "content": content}], "data_source": "math_dapo",
                                 "reward_model": {"ground_truth": "5", "style": "rule-lighteval/MATH_v2"}}])
    assert rec["prompt"] == hub.PROMPT.format(problem="Find $x$ if $2x = 10$.") and rec["answer"] == "5"
    assert graders.grade(rec, "so x = \\boxed{5}") == 1.0 and graders.grade(rec, "\\boxed{x = 5}") == 1.0


@pytest.mark.parametrize("name,row,answer", [
    ("aime24", {"id": 60, "problem": "Find the remainder.", "solution": "\\boxed{204}", "url": "u"}, "204"),
    ("aime25", {"id": "0", "problem": "Find the remainder.", "answer": "70"}, "70"),
    ("math500", {"problem": "Find the remainder.", "answer": "\\frac{14}{3}", "subject": "Algebra", "level": 3,
                 "unique_id": "test/algebra/1.json", "solution": "..."}, "\\frac{14}{3}"),
])
def test_math_benchmarks(name, row, answer):
    (rec,) = load(name, [row])
    assert rec["prompt"] == "Find the remainder.\n\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert rec["answer"] == answer and rec["kind"] == "math"
    assert graders.grade(rec, f"\\boxed{{{answer}}}") == 1.0 and graders.grade(rec, "\\boxed{1}") == 0.0


# ------------------------------------------------------------------ SCIENCE: SciKnowEval
def card_row_of_sciknoweval(record):
    """The release's SciKnowEval record taken apart into a row of the dataset's shape."""
    body = record["prompt"].removesuffix("\nPlease reason step by step.")
    question, listing = body.rsplit("\n\n", 1)
    labels, texts = zip(*(line.split(": ", 1) for line in listing.split("\n")))
    return {"question": question, "choices": {"text": list(texts), "label": list(labels)}, "answerKey": record["answer"],
            "domain": "Chemistry", "type": "mcq-4-choices", "details": {"level": "L3"}}


def test_sciknoweval_rebuilds_the_release_records():
    """All 210 of the release's chemistry test records, rebuilt: prompt, system and answer identical."""
    release = tasks.load_records(os.path.join(DATA, "sciknoweval_chemistry_test.json"))
    other = dict(card_row_of_sciknoweval(release[0]), domain="Biology")
    recs = load("sciknoweval_chemistry", [card_row_of_sciknoweval(r) for r in release] + [other])
    assert len(recs) == len(release) == 210
    for mine, theirs in zip(recs, release):
        assert (mine["prompt"], mine["system"], mine["answer"], mine["kind"]) == \
            (theirs["prompt"], theirs["system"], theirs["answer"], theirs["kind"])
    assert graders.grade(recs[0], "<answer>\n" + release[0]["answer"] + "\n</answer>") == 1.0


# ------------------------------------------------------------------ GPQA and MMLU-Redux: a boxed letter
def test_gpqa_prompt_and_grade():
    row = {"Question": "Which particle is a lepton?", "Correct Answer": "electron", "Incorrect Answer 1": "proton",
           "Incorrect Answer 2": "neutron", "Incorrect Answer 3": "pion", "High-level domain": "Physics"}
    (rec,) = load("gpqa_diamond", [row])
    options = re.search(r"Options: (.*)\nAnswer:", rec["prompt"]).group(1)
    assert rec["prompt"] == ("Return your final response within \\boxed{} and only include the letter choice (A, B, C, "
                             "or D) as your final response.\nProblem: Which particle is a lepton?\nOptions: "
                             + options + "\nAnswer:")
    assert re.fullmatch(r"A\) \w+, B\) \w+, C\) \w+, D\) \w+", options)
    assert f"{rec['answer']}) electron" in options and rec["kind"] == "gpqa"
    assert load("gpqa_diamond", [row]) == [rec]   # the same letters every time (the release reshuffles)
    assert graders.grade(rec, f"\\boxed{{{rec['answer']}}}") == 1.0


def test_mmlu_redux_prompt_keeps_only_rows_marked_ok():
    rows = [{"question": "2 + 2 = ?", "choices": ["3", "4", "5", "6"], "answer": 1, "error_type": "ok",
             "source": "s", "correct_answer": None, "potential_reason": ""},
            {"question": "bad", "choices": ["a", "b", "c", "d"], "answer": 0, "error_type": "wrong_groundtruth",
             "source": "s", "correct_answer": "B", "potential_reason": ""}]
    (rec,) = load("mmlu_redux", rows)
    assert rec["prompt"] == ("2 + 2 = ?\nOptions are:\nA: 3\nB: 4\nC: 5\nD: 6\n\nPlease reason step by step, and put "
                             "your final answer option within \\boxed{}. Only put the option letter in the box, e.g. "
                             "\\boxed{A}. There is only one correct answer.")
    assert rec["answer"] == "B" and graders.grade(rec, "\\boxed{B}") == 1.0
    load_dataset, calls = fake_hub(rows[:1])
    hub.load_hub_task("hf:mmlu_redux:college_physics", load_dataset=load_dataset)
    assert calls == [("edinburgh-dawg/mmlu-redux-2.0", "college_physics", "test")]


# ------------------------------------------------------------------ TOOLUSE: ToolAlpaca, and BFCL
def api_of_toolalpaca(records):
    """The release's TOOLUSE records of one API taken apart into a ToolAlpaca data-file entry."""
    head = records[0]["prompt"]
    name = re.search(r"\nName: (.*)\n", head).group(1)
    description = re.search(r"\nDescription: (.*)\nDocumentation:\n", head).group(1)
    docs = head.split("\nDocumentation:\n", 1)[1].split("\n\nUse the following format:", 1)[0]
    parts = re.split(r"\n(?=[^\s:]+: [^\n]*\nParameters: )", docs)
    functions = dict(p.split(": ", 1) for p in parts)
    instances = [{"input": r["prompt"].rsplit("\nQuestion: ", 1)[1], "output": "...", "Final Thought": "...",
                  "intermediate_steps": [[[c["Action"], c["Action_Input"], "Thought: ..."], "observation"]
                                         for c in json.loads(r["answer"])]} for r in records]
    return {"Name": name, "Description": description, "Category": "c", "Introduction": "i",
            "Function_Description": functions, "NLDocumentation": docs, "Instances": instances}


def test_toolalpaca_rebuilds_the_release_records(tmp_path):
    """All 48 of the release's TOOLUSE test records, rebuilt from ToolAlpaca-shaped API entries."""
    release = tasks.load_records(os.path.join(DATA, "tooluse_test.json"))
    by_api = {}
    for r in release:
        by_api.setdefault(r["prompt"].split("\nQuestion: ")[0], []).append(r)
    path = tmp_path / "train_data.json"
    path.write_text(json.dumps([api_of_toolalpaca(rs) for rs in by_api.values()]))
    recs = hub.load_hub_task(f"hf:toolalpaca:{path}")
    mine = sorted((r["prompt"], r["answer"]) for r in recs)
    theirs = sorted((r["prompt"], json.dumps(json.loads(r["answer"]))) for r in release)
    assert len(mine) == 48 and mine == theirs
    # tools/prepare_data.py writes them as a record file a run reads (--stages FILE), and replaces only its own
    out = tmp_path / "data"
    prepare_data.main([f"hf:toolalpaca:{path}", "--out", str(out)])
    written = out / "toolalpaca_train_data.jsonl"
    assert tasks.task_records(str(written)) == tasks.with_release_rules(recs)
    with pytest.raises(SystemExit, match="2"):
        prepare_data.main([f"hf:toolalpaca:{path}", "--out", str(out)])    # there already: nothing replaced
    prepare_data.main([f"hf:toolalpaca:{path}", "--out", str(out), "--overwrite"])
    (out / "toolalpaca_train_data.jsonl").write_text("a user's own file\n")
    (out / ".prepared").write_text("")   # (this command's record of its files, emptied: the file is not its own)
    with pytest.raises(SystemExit, match="2"):
        prepare_data.main([f"hf:toolalpaca:{path}", "--out", str(out), "--overwrite"])
    assert (out / "toolalpaca_train_data.jsonl").read_text() == "a user's own file\n"


def test_bfcl_reads_the_question_and_answer_files(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    fn = {"name": "math.factorial", "description": "Factorial of n.",
          "parameters": {"type": "dict", "properties": {"n": {"type": "integer", "description": "The number."}},
                         "required": ["n"]}}
    (tmp_path / "BFCL_v4_multiple.json").write_text(json.dumps(
        {"id": "multiple_0", "question": [[{"role": "user", "content": "What is 5 factorial?"}]], "function": [fn]}) + "\n")
    (tmp_path / "possible_answer" / "BFCL_v4_multiple.json").write_text(json.dumps(
        {"id": "multiple_0", "ground_truth": [{"math.factorial": {"n": [5]}}]}) + "\n")
    (rec,) = hub.load_hub_task(f"hf:bfcl:{tmp_path / 'BFCL_v4_multiple.json'}")
    assert rec["prompt"] == hub.TOOL_PROMPT.format(
        name="functions", description="The functions you can call.",
        documentation='math.factorial: Factorial of n.\nParameters: {"n": "integer. The number."}',
        question="What is 5 factorial?")
    assert graders.grade(rec, 'Action: math.factorial\nAction Input: {"n": 5}') == 1.0
    assert graders.grade(rec, 'Action: math.factorial\nAction Input: {"n": 4}') == 0.0


def test_file_datasets_need_their_file():
    for spec in ("hf:toolalpaca", "hf:bfcl:/no/such/file.json"):
        with pytest.raises(ValueError, match="downloaded file"):
            hub.check_hub_task(spec)


# ------------------------------------------------------------------ CODING: LiveCodeBench v6, Dolci
def lcb_encoded(tests):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


LCB_ROW = {"question_title": "t", "question_content": "Return the sum of the k largest numbers.", "platform": "leetcode",
           "question_id": "1", "contest_id": "c", "contest_date": "2025-03-01T00:00:00", "difficulty": "easy",
           "starter_code": "class Solution:\n    def maxSum(self, nums: List[int], k: int) -> int:\n        ",
           "public_test_cases": json.dumps([{"input": "[1, 2, 3]\n2", "output": "5", "testtype": "functional"}]),
           "private_test_cases": lcb_encoded([{"input": "[1, 2, 3]\n2", "output": "5", "testtype": "functional"},
                                              {"input": "[4]\n1", "output": "4", "testtype": "functional"}]),
           "metadata": json.dumps({"func_name": "maxSum"})}


def test_livecodebench_prompt_tests_and_window(capsys):
    old = dict(LCB_ROW, contest_date="2024-06-01T00:00:00")   # before the release's v6 window
    (rec,) = load("livecodebench", [LCB_ROW, old])
    assert "kept 1 of 2 rows" in capsys.readouterr().out
    assert rec["prompt"] == (
        "You are a coding expert. You will be given a coding problem, and you need to write a correct Python program "
        "that matches the specification and passes all tests. The time limit is 1 second. You may start by outlining "
        "your thought process. In the end, please provide the complete code in a code block enclosed with ``` ```.\n\n"
        "Return the sum of the k largest numbers.\n\nYour solution should have the following signature: ```python\n"
        "def maxSum(self, nums: List[int], k: int) -> int:\n```")
    tests = json.loads(rec["tests"])
    assert tests["inputs"] == ["[1, 2, 3]\n2", "[4]\n1"] and tests["fn_name"] == "maxSum" and tests["time_limit"] == 6
    # the release's grader finds a top-level def, never a Solution method (docs/PROTOCOL.md, CODING)
    assert graders.grade(rec, "```python\nclass Solution:\n    def maxSum(self, nums, k):\n        return sum(sorted(nums)[-k:])\n```") == 0.0
    right = "```python\ndef maxSum(nums, k):\n    return sum(sorted(nums)[-k:])\n```"
    assert graders.grade(rec, right) == 1.0 and graders.grade(rec, right.replace("[-k:]", "[:k]")) == 0.0


def test_livecodebench_private_tests_are_never_unpickled_as_code():
    evil = base64.b64encode(zlib.compress(pickle.dumps(os.getcwd))).decode()   # a pickle that names a function
    with pytest.raises(pickle.UnpicklingError):
        hub.lcb_private_tests(evil)


def test_dolci_code_rows_and_stdin_livecodebench():
    rows = [{"id": "1", "prompt": "Write add(a, b).", "dataset": ["code"], "ground_truth": ["assert add(1, 2) == 3"]},
            {"id": "2", "prompt": "Say hi.", "dataset": ["general-quality"], "ground_truth": ["hi"]}]
    (rec,) = load("dolci_code", rows)
    assert rec["prompt"] == hub.CODE_PROMPT.format(problem="Write add(a, b).")
    assert graders.grade(rec, "```python\ndef add(a, b):\n    return a + b\n```") == 1.0
    stdin = dict(LCB_ROW, starter_code="", metadata="{}", private_test_cases="",
                 public_test_cases=json.dumps([{"input": "3\n", "output": "6\n", "testtype": "stdin"}]))
    (rec,) = load("livecodebench", [stdin])
    assert rec["prompt"].endswith("\n\nReturn the sum of the k largest numbers.")
    assert graders.grade(rec, "```python\nprint(2 * int(input()))\n```") == 1.0


# ------------------------------------------------------------------ LOGIC: ZebraLogic
def test_zebralogic_loads_from_the_hub_shape():
    row = {"id": "lgp-test-2x2-1", "size": "2*2", "puzzle": "P", "created_at": "2024",
           "solution": {"header": ["House", "Name"], "rows": [["1", "Eric"], ["2", "Arnold"]]}}
    (rec,) = load("zebralogic", [row])
    assert rec["kind"] == "zebralogic" and json.loads(rec["answer"]) == {"House 1": {"Name": "Eric"}, "House 2": {"Name": "Arnold"}}


def test_every_dataset_of_the_release_table_has_an_adapter():
    """docs/DATA.md of the release: DAPO-Math-17k, AIME 24/25, Math500, SciKnowEval, GPQA, ToolAlpaca,
    BFCL v4, Dolci-Think-RL-7B, LiveCodeBench v6, ZebraLogic, MMLU-Redux."""
    assert set(hub.HUB_TASKS) == {"dapo_math", "aime24", "aime25", "math500", "sciknoweval_chemistry", "gpqa_diamond",
                                    "toolalpaca", "bfcl", "dolci_code", "livecodebench", "zebralogic", "mmlu_redux"}
    with pytest.raises(ValueError, match="unknown hub task"):
        hub.check_hub_task("hf:nope")
