"""world/hub.py — the paper's datasets (the release's docs/DATA.md table) as release-format records, for
`python tools/prepare_data.py hf:NAME`, which writes them to a JSON-lines file that a run then reads (`--stages FILE`,
`--benchmarks FILE`), as verl's data_preprocess scripts and the release do. A run never downloads.

'hf:NAME' is loaded with datasets.load_dataset; ToolAlpaca and BFCL live on GitHub, so 'hf:toolalpaca:FILE' and
'hf:bfcl:FILE' read their downloaded JSON. One adapter per dataset turns a row into a record with the release's
prompt text (data/format/*.py in the release) and the grader it uses. Field names follow each dataset's public
card. Rows an adapter cannot use return None (and are counted).
"""
import base64
import hashlib
import io
import json
import os
import pickle
import random
import zlib

import datasets

from world.sandbox import parse_tests

# data/format/prompts.py: MATH, AIME, Math500 (and the release's training data by kind)
PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
CODE_PROMPT = ("You are a coding expert. You will be given a coding problem, and you need to write a correct Python "
               "program that matches the specification and passes all tests. The time limit is 1 second. You may start "
               "by outlining your thought process. In the end, please provide the complete code in a code block "
               "enclosed with ``` ```.\n\n{problem}")
# data/format/sciknoweval.py (identical to the `system` of the release's own SciKnowEval records)
MCQ_SYSTEM = ("\nGiven a question and four options, please select the right answer. Respond in the following format:\n"
              "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n\nFor the answer, only output the letter "
              "corresponding to the correct option (A, B, C, or D), and nothing else. Do not restate the answer text. "
              "For example, if the answer is \"A\", just output:\n<answer>\nA\n</answer>\n")
# data/format/gpqa.py
GPQA_PROMPT = ("Return your final response within \\boxed{{}} and only include the letter choice (A, B, C, or D) as "
               "your final response.\nProblem: {problem}\nOptions: {options}\nAnswer:")
# data/format/mmlu_pro.py, its boxed-letter ("webinstruct") form: the paper's boxed MCQ template
MMLU_SUFFIX = ("\nPlease reason step by step, and put your final answer option within \\boxed{}. Only put the option "
               "letter in the box, e.g. \\boxed{A}. There is only one correct answer.")
# the TOOLUSE (ToolAlpaca) and BFCL template, as in the release's TOOLUSE records
TOOL_PROMPT = ("Your task is to answer the user's question using available tools. \nYou have access to the following "
               "tools:\nName: {name}\nDescription: {description}\nDocumentation:\n{documentation}\n\nUse the following "
               "format:\nThought: you should always think about what to do\nAction: the action to take, should be one "
               "of the tool names.\nAction Input: the input to the action, must be in JSON format. All of the action "
               "input must be realistic and from the user.\n\nBegin!\nQuestion: {question}")
# ZebraLogic: ours (the release has none), after the benchmark's grid-mode definition
ZEBRA_PROMPT = ("{puzzle}\n\nSolve the puzzle. Reason step by step, then give the solution as a JSON object in this "
                "format, filling in every cell:\n\n{template}")
DAPO_HEAD = ("Solve the following math problem step by step. The last line of your response should be of the form "
             "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_TAIL = "\n\nRemember to put your answer on its own line after \"Answer:\"."


def _record(prompt, answer, kind, dataset, system=None, tests=None):
    return {"prompt": prompt, "answer": answer, "kind": kind, "dataset": dataset, "system": system, "tests": tests}


def adapt_dapo_math(row):
    """BytedTsinghua-SIA/DAPO-Math-17k: the problem inside DAPO's own instruction, reward_model.ground_truth.
    The release trains on the bare problem in its PROMPT."""
    text = row["prompt"][-1]["content"]
    problem = text.removeprefix(DAPO_HEAD).removesuffix(DAPO_TAIL).strip()
    return _record(PROMPT.format(problem=problem), str(row["reward_model"]["ground_truth"]), "math", "dapo_math")


def adapt_math(row, answer_key="answer"):
    """math-ai/math500, math-ai/aime25: problem, answer."""
    return _record(PROMPT.format(problem=row["problem"]), str(row[answer_key]), "math", "math")


def adapt_aime24(row):
    """math-ai/aime24: problem, solution = '\\boxed{N}' (the release keeps what is inside the box)."""
    return _record(PROMPT.format(problem=row["problem"]), str(row["solution"])[7:-1], "math", "math")


def adapt_sciknoweval(row, domain="Chemistry"):
    """hicai-zju/SciKnowEval: question, choices {text, label}, answerKey, domain, type; the domain's
    4-option MCQ rows, answered <answer>X</answer> (the release's SCIENCE)."""
    choices = row.get("choices") or {}
    if row.get("type") != "mcq-4-choices" or len(choices.get("text", [])) != 4 or row.get("domain") != domain:
        return None
    listing = "\n".join(f"{label}: {text}" for label, text in zip(choices["label"], choices["text"]))
    return _record(row["question"] + "\n\n" + listing + "\nPlease reason step by step.", row["answerKey"], "mcq",
                   "sciknoweval", MCQ_SYSTEM)


def _shuffled(options, key):
    """A deterministic permutation of the options (seeded by the question), and where index 0 went.
    The release shuffles with the unseeded `random`, so its letters change from run to run."""
    order = list(range(len(options)))
    random.Random(hashlib.sha1(key.encode()).hexdigest()).shuffle(order)
    return [options[i] for i in order], order.index(0)


def adapt_gpqa(row):
    """Idavidrein/gpqa (gpqa_diamond): Question, 'Correct Answer', 'Incorrect Answer 1..3'."""
    options, right = _shuffled([row["Correct Answer"]] + [row[f"Incorrect Answer {i}"] for i in (1, 2, 3)],
                               row["Question"])
    listing = ", ".join(f"{'ABCD'[i]}) {o}" for i, o in enumerate(options))
    return _record(GPQA_PROMPT.format(problem=row["Question"], options=listing), "ABCD"[right], "gpqa", "gpqa")


def adapt_mmlu_redux(row):
    """edinburgh-dawg/mmlu-redux-2.0 (a config per subject): question, choices, answer (index),
    error_type. Only rows its annotators marked 'ok' (the others have a wrong or unclear key)."""
    if row.get("error_type", "ok") != "ok" or len(row["choices"]) != 4:
        return None
    listing = "".join(f"{'ABCD'[i]}: {c}\n" for i, c in enumerate(row["choices"]))
    return _record(row["question"] + "\nOptions are:\n" + listing + MMLU_SUFFIX, "ABCD"[int(row["answer"])], "gpqa",
                   "mmlu_redux")


class _StringsOnly(pickle.Unpickler):
    """LiveCodeBench's private tests are a pickled JSON string: refuse anything but plain data."""
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused: {module}.{name}")


LCB_MAX_BYTES = 256 * 2**20   # the largest decompressed private tests accepted (a zip bomb stops here)


def lcb_private_tests(encoded, max_bytes=LCB_MAX_BYTES):
    """LiveCodeBench's private tests: base64 of zlib of a pickled JSON string, decompressed to at most
    max_bytes (ValueError beyond)."""
    inflater = zlib.decompressobj()
    data = inflater.decompress(base64.b64decode(encoded), max_bytes)
    if inflater.unconsumed_tail:
        raise ValueError(f"private tests decompress to more than {max_bytes // 2**20} MB (refused)")
    return json.loads(_StringsOnly(io.BytesIO(data)).load())


LCB_V6 = ("2025-02-01", "2025-05-01")   # the release's LiveCodeBench v6 window: contest_date in [from, until)


def adapt_livecodebench(row):
    """livecodebench/code_generation_lite: question_content, starter_code, public/private test cases,
    metadata (func_name), contest_date. The release's prompt (CODE_PROMPT, with the signature of the
    starter code), its private tests and its 6 s limit."""
    if not LCB_V6[0] <= str(row.get("contest_date", ""))[:10] < LCB_V6[1]:
        return None
    problem = row["question_content"]
    if (row.get("starter_code") or "").strip():
        signature = "def " + row["starter_code"].split("def ", 1)[1].split("Input\n")[0].strip()
        problem += f"\n\nYour solution should have the following signature: ```python\n{signature}\n```"
    meta = json.loads(row["metadata"]) if (row.get("metadata") or "").strip() else {}
    cases = lcb_private_tests(row["private_test_cases"]) if row.get("private_test_cases") else []
    if not cases:
        public = row["public_test_cases"]
        cases = json.loads(public) if isinstance(public, str) else public
    if not cases:
        return None
    tests = {"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases],
             "testtype": cases[0]["testtype"], "fn_name": meta.get("func_name", ""), "time_limit": 6}
    return _record(CODE_PROMPT.format(problem=problem), "", "code", "livecodebench", tests=json.dumps(tests))


def adapt_dolci_code(row):
    """allenai/Dolci-Think-RL-7B: prompt, ground_truth (list of str), dataset (list of str). Its code
    rows: ground_truth holds test code (asserts) run after the program, the release's 'code' test type. The
    sandbox parses the asserts and never runs test code in the program: a row with other statements is dropped."""
    if "code" not in (row.get("dataset") or []) or not row.get("ground_truth"):
        return None
    tests = {"inputs": list(row["ground_truth"]), "outputs": [None] * len(row["ground_truth"]), "testtype": "code"}
    if parse_tests(tests) is None:
        return None
    return _record(CODE_PROMPT.format(problem=row["prompt"]), "", "code", "code", tests=json.dumps(tests))


def adapt_toolalpaca(api):
    """ToolAlpaca (github.com/tangqiaoyu/ToolAlpaca, data/*.json): one API with Name, Description,
    Function_Description {function: its documentation} and Instances [{input, intermediate_steps:
    [[[action, action_input, thought], observation], ...]}] -> one record per instance."""
    documentation = "\n".join(f"{fn}: {doc}" for fn, doc in api["Function_Description"].items())
    out = []
    for inst in api.get("Instances") or []:
        steps = inst.get("intermediate_steps") or []
        calls = [{"Action": s[0][0], "Action_Input": s[0][1]} for s in steps if s and s[0]]
        if not calls:
            continue   # an instance answered without a call: nothing to grade
        prompt = TOOL_PROMPT.format(name=api["Name"], description=api["Description"], documentation=documentation,
                                    question=inst["input"])
        out.append(_record(prompt, json.dumps(calls), "tooluse", "tooluse"))
    return out


def bfcl_documentation(functions):
    """BFCL's function schemas in the ToolAlpaca documentation style ('name: description / Parameters')."""
    lines = []
    for f in functions:
        props = (f.get("parameters") or {}).get("properties") or {}
        params = {p: f"{v.get('type', 'any')}. {v.get('description', '')}".strip() for p, v in props.items()}
        lines.append(f"{f['name']}: {f.get('description', '')}\nParameters: {json.dumps(params)}")
    return "\n".join(lines)


def adapt_bfcl(row):
    """BFCL v4 'multiple' (bfcl_eval/data/BFCL_v4_multiple.json, one JSON object per line: id, question
    [[{role, content}]], function [schemas]) joined by id with possible_answer/BFCL_v4_multiple.json
    (ground_truth [{function: {param: [possible values]}}]), in the TOOLUSE template (paper, C.4)."""
    if "ground_truth" not in row:
        return None
    question = next(m["content"] for m in reversed(row["question"][0]) if m["role"] == "user")
    prompt = TOOL_PROMPT.format(name="functions", description="The functions you can call.",
                                documentation=bfcl_documentation(row["function"]), question=question)
    return _record(prompt, json.dumps(row["ground_truth"]), "bfcl", "bfcl", tests=json.dumps(row["function"]))


def adapt_zebralogic(row):
    """allenai/ZebraLogicBench-private (grid_mode): id, size, puzzle, solution {header, rows}."""
    header, rows = row["solution"]["header"], row["solution"]["rows"]
    solution = {f"{header[0]} {r[0]}": dict(zip(header[1:], r[1:])) for r in rows}
    template = json.dumps({"reasoning": "___", "solution": {h: {a: "___" for a in header[1:]} for h in solution}}, indent=4)
    return _record(ZEBRA_PROMPT.format(puzzle=row["puzzle"], template=template), json.dumps(solution), "zebralogic",
                   "zebralogic")


# name: (dataset id or None for a GitHub file, config, split, adapter)
HUB_TASKS = {
    "dapo_math": ("BytedTsinghua-SIA/DAPO-Math-17k", None, "train", adapt_dapo_math),
    "aime24": ("math-ai/aime24", None, "test", adapt_aime24),
    "aime25": ("math-ai/aime25", None, "test", adapt_math),
    "math500": ("math-ai/math500", None, "test", adapt_math),
    "sciknoweval_chemistry": ("hicai-zju/SciKnowEval", None, "test", adapt_sciknoweval),
    "gpqa_diamond": ("Idavidrein/gpqa", "gpqa_diamond", "train", adapt_gpqa),
    "toolalpaca": (None, None, None, adapt_toolalpaca),
    "bfcl": (None, None, None, adapt_bfcl),
    "dolci_code": ("allenai/Dolci-Think-RL-7B", None, "train", adapt_dolci_code),
    "livecodebench": ("livecodebench/code_generation_lite", "release_v6", "test", adapt_livecodebench),
    "zebralogic": ("allenai/ZebraLogicBench-private", "grid_mode", "test", adapt_zebralogic),
    "mmlu_redux": ("edinburgh-dawg/mmlu-redux-2.0", "abstract_algebra", "test", adapt_mmlu_redux),
}
FILE_TASKS = {"toolalpaca": "hf:toolalpaca:PATH (a ToolAlpaca data file, e.g. train_data.json)",
              "bfcl": "hf:bfcl:PATH (BFCL_v4_multiple.json; possible_answer/BFCL_v4_multiple.json beside it or in "
                      "a possible_answer/ folder next to it)"}


def read_json_rows(path):
    """A JSON list or JSON-lines file as a list of rows (ToolAlpaca and BFCL files)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def bfcl_rows(path):
    """BFCL questions joined with their possible answers (the file of the same name under possible_answer/)."""
    here = os.path.dirname(path)
    for answers in (os.path.join(here, "possible_answer", os.path.basename(path)),
                    os.path.join(os.path.dirname(here), "possible_answer", os.path.basename(path))):
        if os.path.isfile(answers):
            truth = {r["id"]: r["ground_truth"] for r in read_json_rows(answers)}
            return [dict(r, ground_truth=truth[r["id"]]) if r["id"] in truth else r for r in read_json_rows(path)]
    raise ValueError(f"{path}: no possible_answer/{os.path.basename(path)} next to it (BFCL's ground truth)")


def check_hub_task(spec):
    """Raise ValueError with a one-line message unless `spec` is a known 'hf:NAME[:CONFIG|:FILE]'."""
    parts = spec.split(":", 2)
    if parts[0] != "hf" or len(parts) < 2 or parts[1] not in HUB_TASKS:
        raise ValueError(f"{spec}: unknown hub task; known: {', '.join('hf:' + n for n in HUB_TASKS)}")
    if parts[1] in FILE_TASKS and (len(parts) < 3 or not os.path.isfile(parts[2])):
        raise ValueError(f"{spec}: {parts[1]} is read from its downloaded file: {FILE_TASKS[parts[1]]}")


def load_hub_task(spec, load_dataset=datasets.load_dataset):
    """'hf:NAME', 'hf:NAME:CONFIG' (hf:mmlu_redux:college_physics) or 'hf:NAME:FILE' (toolalpaca, bfcl)
    -> release-format records."""
    check_hub_task(spec)
    parts = spec.split(":", 2)
    name, arg = parts[1], (parts[2] if len(parts) > 2 else None)
    path, default_config, split, adapter = HUB_TASKS[name]
    if path is None:
        rows = bfcl_rows(arg) if name == "bfcl" else read_json_rows(arg)
    else:
        rows = load_dataset(path, arg or default_config, split=split)
    records = []
    for row in rows:
        got = adapter(row)
        records.extend(got if isinstance(got, list) else [got] if got is not None else [])
    if name != "toolalpaca" and len(records) < len(rows):
        print(f"{spec}: kept {len(records)} of {len(rows)} rows (the others have a format this adapter does not grade)")
    if not records:
        raise ValueError(f"{spec}: no usable records")
    return records


