"""TOOLUSE grader (graders.check_tooluse): the release's rule (feedback/tooluse.py) — the multiset of
action names equals the reference's and the merged Action Inputs equal the merged reference inputs —
its lenient readings, its feedback string, and the two places where we keep the correct behaviour."""
import json

import pytest

from world import graders


def rec(*calls):
    return {"kind": "tooluse", "answer": json.dumps([{"Action": n, "Action_Input": json.dumps(i)} for n, i in calls])}


TIMER = rec(("timer", {"minutes": 5}))
RANDOM = rec(("getRandomAxolotlImage", {}))


@pytest.mark.parametrize("record,response", [
    (TIMER, "Thought: x\nAction: timer\nAction Input: {\"minutes\": 5}"),
    (TIMER, "Action: timer Action Input: {\"minutes\": 5}"),             # one line
    (TIMER, "Action: timer.\nAction Input: {\"minutes\": 5}"),           # a trailing period
    (TIMER, "Action:\ntimer\nAction Input: {\"minutes\": 5}"),           # the name on the next line
    (TIMER, "Action Input: {\"minutes\": 5}\nAction: timer"),            # input before the action
    (TIMER, "Action: timer\nAction Input: {\"minutes\": 5}\nAction Input: {not json}"),   # bad JSON is skipped
    (RANDOM, "Action: getRandomAxolotlImage"),                           # no input where the reference's is {}
    (RANDOM, "Action: getRandomAxolotlImage\nAction Input: {not json}"),
    (rec(("a", {"x": 1}), ("b", {"y": 2})), "Action: b\nAction Input: {\"y\": 2}\nAction: a\nAction Input: {\"x\": 1}"),
])
def test_release_accepts(record, response):
    assert graders.check(record, response) == (1.0, "")


@pytest.mark.parametrize("response", [
    "Action: timer\nAction Input: {\"minutes\": 6}", "Action: alarm\nAction Input: {\"minutes\": 5}",
    "Action: timer\nAction Input: {}", "Action: timer", "",
    "Action: timer\nAction Input: {\"minutes\": 5}\nAction: timer\nAction Input: {\"minutes\": 5}",
    "Action: timer\nAction Input: {\"minutes\": 5",
])
def test_release_rejects(response):
    assert graders.grade(TIMER, response) == 0.0


def test_nested_json_is_read_whole():
    """The release's non-greedy `{.*?}` cuts `{"a": {"b": 1}}` at the first `}` and scores it 0; we read it."""
    nested = rec(("q", {"a": {"b": [1, {"c": 2}]}}))
    assert graders.grade(nested, "Action: q\nAction Input: {\"a\": {\"b\": [1, {\"c\": 2}]}}") == 1.0


def test_names_the_release_can_never_match():
    """ToolAlpaca has names like `[Optional]getX`; the release's \\w+ reads nothing there."""
    odd = rec(("[Optional]getX", {"k": 1}))
    assert graders.grade(odd, "Action: [Optional]getX\nAction Input: {\"k\": 1}") == 1.0


def test_feedback_is_the_release_string():
    assert graders.feedback(TIMER, "Action: alarm\nAction Input: {\"minutes\": 6}") == (
        "Actions mismatch: predicted ['alarm'], expected ['timer']; "
        "Action inputs mismatch: predicted {'minutes': 6}, expected {'minutes': 5}")
    assert graders.feedback(TIMER, "Action: timer\nAction Input: {\"minutes\": 6}") == (
        "Action inputs mismatch: predicted {'minutes': 6}, expected {'minutes': 5}")
    assert graders.feedback(TIMER, "Action: timer\nAction Input: {\"minutes\": 5}") is None
