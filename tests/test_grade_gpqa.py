"""GPQA-style letter grader (GPQA, MMLU-Redux, the built-in science_boxed; graders.check_gpqa): the
release's rule (feedback/gpqa.py) — the last standalone A-D of the upper-cased text — read inside the
last \\boxed{} when there is one."""
import pytest

from world import graders

REC = {"kind": "gpqa", "answer": "B"}


@pytest.mark.parametrize("response", ["\\boxed{B}", "the answer is \\boxed{B}.", "B", "B.", "(B)", "answer: b",
                                      "\\boxed{B} is a guess",   # the release reads the article `a` as A here
                                      "\\boxed{\\text{B}}", "A or B"])
def test_accepts(response):
    assert graders.grade(REC, response) == 1.0


@pytest.mark.parametrize("response", ["\\boxed{A}", "B or A", "\\boxed{B} no, \\boxed{C}", "BB", "", "\\boxed{E}"])
def test_rejects(response):
    assert graders.grade(REC, response) == 0.0


def test_the_release_rule_without_a_box():
    """With no box the whole text is read, as in the release: the last standalone letter, even an article."""
    assert graders.answer_letter("B, I think. Is that a good one?") == "A"
    assert graders.answer_letter("none of them.") == "none of them"   # no letter: the text itself
