"""ZebraLogic grader (graders.check_zebralogic). The release has none; this follows the benchmark's grid
mode: the answer is a JSON grid, a puzzle counts when every cell is right."""
import json

from world import hub
from world import graders

ROW = {"id": "lgp-test-2x2-1", "size": "2*2", "puzzle": "There are 2 houses, numbered 1 to 2 ...",
       "solution": {"header": ["House", "Name", "Color"], "rows": [["1", "Eric", "Red"], ["2", "Arnold", "Blue"]]}}
REC = hub.adapt_zebralogic(ROW)


def answer(grid, reasoning="Eric is in house 1."):
    return "Let me think.\n" + json.dumps({"reasoning": reasoning, "solution": grid})


def test_every_cell_right_scores_one():
    grid = {"House 1": {"Name": "Eric", "Color": "Red"}, "House 2": {"Name": "Arnold", "Color": "Blue"}}
    assert graders.grade(REC, answer(grid)) == 1.0
    assert graders.grade(REC, "```json\n" + json.dumps({"solution": {"House 1": {"Name": " eric ", "Color": "RED"},
                                                                      "House 2": {"Name": "Arnold", "Color": "Blue"}}}) + "\n```") == 1.0


def test_one_wrong_or_missing_cell_scores_zero():
    grid = {"House 1": {"Name": "Arnold", "Color": "Red"}, "House 2": {"Name": "Eric", "Color": "Blue"}}
    assert graders.grade(REC, answer(grid)) == 0.0
    assert graders.grade(REC, answer({"House 1": {"Name": "Eric", "Color": "Red"}})) == 0.0
    assert graders.check(REC, "Eric lives in house 1.") == (0.0, "Your response did not contain the solution as a JSON object.")


def test_the_prompt_shows_the_grid_to_fill():
    assert REC["prompt"].startswith(ROW["puzzle"] + "\n\nSolve the puzzle.")
    template = json.loads(REC["prompt"][REC["prompt"].index("{"):])
    assert template["solution"] == {"House 1": {"Name": "___", "Color": "___"}, "House 2": {"Name": "___", "Color": "___"}}
