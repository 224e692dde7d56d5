"""MCQ grader (SciKnowEval, graders.check_mcq): the release's rule (feedback/mcq.py) — the text after the
last <answer>, up to </answer> if present, stripped, equals the letter. Feedback: none."""
import pytest

from world import graders

REC = {"kind": "mcq", "answer": "B"}


@pytest.mark.parametrize("response", [
    "<reasoning>\n...\n</reasoning>\n<answer>\nB\n</answer>", "<answer>B</answer>",
    "B",                      # a bare letter: no tag, so the whole (stripped) text is the answer
    "<answer>\nB\n",          # no closing tag
    "B</answer>",             # no opening tag
    "<answer>A</answer> no wait <answer>\nB\n</answer>",   # the last one counts
])
def test_release_accepts(response):
    assert graders.check(REC, response) == (1.0, "")


@pytest.mark.parametrize("response", ["<answer>C</answer>", "<answer>B, C</answer>", "The answer is B",
                                      "<answer>B</answer> no, <answer>A</answer>", "<answer>B: the first option</answer>", ""])
def test_release_rejects(response):
    assert graders.check(REC, response) == (0.0, "")
