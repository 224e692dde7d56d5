"""MATH grader (graders.check_math): the release's rule (feedback/math.py) — the last \\boxed{} equals the
answer as text, else math-verify says they are the same — and the places we deliberately differ."""
import pytest

from world import graders

GOLD = {"kind": "math", "answer": ""}


def grade(answer, response):
    return graders.grade(dict(GOLD, answer=answer), response)


@pytest.mark.parametrize("answer,boxed", [
    ("\\frac{14}{3}", "14/3"), ("14/3", "\\frac{14}{3}"), ("5", "x = 5"), ("90", "90^\\circ"),
    ("10", "10\\text{ cm}"), ("9", "{9}"), ("\\sqrt{2}", "\\sqrt 2"), ("0.5", "\\frac{1}{2}"), ("1000", "1,000"),
    ("x^2+1", "1+x^2"), ("[1,2)", "[1, 2)"), ("6-5i", "6 - 5i"), ("3", "3.0"), ("(63,1,-1)", "(63, 1, -1)"),
])
def test_math_verify_equivalences_score_one(answer, boxed):
    """The release's math-verify fallback: the same mathematical object written another way."""
    assert grade(answer, f"so the answer is \\boxed{{{boxed}}}") == 1.0


@pytest.mark.parametrize("answer,boxed", [
    ("(6,31,-1)", "(63,1,-1)"),   # commas are not deleted (our old bug)
    ("5", "6 - 5i"),             # the release: math-verify reads the bare `6 - 5i` as 5 (we parse the whole box)
    ("6-5i", "6+5i"), ("14", "13"), ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("Cal", "Lac"),              # words are not products of symbols
])
def test_different_answers_score_zero(answer, boxed):
    assert grade(answer, f"\\boxed{{{boxed}}}") == 0.0


def test_the_whole_response_is_read():
    """The release looks at the last 100 characters only; a right box followed by a long remark is right here."""
    assert grade("7", "\\boxed{7}" + " and that is why." * 10) == 1.0


def test_the_last_box_counts_and_the_format_feedback():
    assert grade("7", "\\boxed{6} no, \\boxed{7}") == 1.0 and grade("7", "\\boxed{7} no, \\boxed{6}") == 0.0
    rec = dict(GOLD, answer="7")
    assert graders.check(rec, "7") == (0.0, graders.MATH_FORMAT_FEEDBACK)            # no box: the release's string
    assert graders.check(rec, "\\boxed{7") == (0.0, graders.MATH_FORMAT_FEEDBACK)    # unbalanced
    assert graders.check(rec, "\\boxed{}") == (0.0, graders.MATH_FORMAT_FEEDBACK)    # empty
    assert graders.check(rec, "\\boxed{6}") == (0.0, "")                           # wrong, well formed: silent
    assert graders.check(rec, "\\boxed{7}") == (1.0, "")


def test_math_verify_is_not_called_for_plain_numbers_or_words(monkeypatch):
    """Grading stays fast: the built-in world's answers never reach the sympy parser."""
    import math_verify
    monkeypatch.setattr(math_verify, "verify", lambda *a, **k: pytest.fail("math-verify called"))
    assert grade("68", "\\boxed{67}") == 0.0 and grade("Cal", "\\boxed{Bob}") == 0.0 and grade("68", "\\boxed{68.0}") == 1.0
