"""BFCL grader (graders.check_bfcl). The release has none; this follows BFCL's AST checker: the right
function, required parameters present, no unknown parameter, every value among its possible answers."""
import json

import pytest

from world import graders

FUNCTIONS = [
    {"name": "triangle_properties.get", "description": "Area and perimeter of a triangle.",
     "parameters": {"type": "dict", "properties": {"side1": {"type": "integer"}, "side2": {"type": "integer"},
                                                   "side3": {"type": "integer"}, "get_area": {"type": "boolean"}},
                    "required": ["side1", "side2", "side3"]}},
    {"name": "circle_properties.get", "description": "Area of a circle.",
     "parameters": {"type": "dict", "properties": {"radius": {"type": "float"}, "unit": {"type": "string"}},
                    "required": ["radius"]}},
]
TRUTH = [{"triangle_properties.get": {"side1": [5], "side2": [4], "side3": [3], "get_area": ["", True]}}]
REC = {"kind": "bfcl", "answer": json.dumps(TRUTH), "tests": json.dumps(FUNCTIONS)}
CIRCLE = {"kind": "bfcl", "answer": json.dumps([{"circle_properties.get": {"radius": [2.0], "unit": ["", "New York, NY"]}}]),
          "tests": json.dumps(FUNCTIONS)}


def call(name, args):
    return f"Thought: t\nAction: {name}\nAction Input: {json.dumps(args)}"


@pytest.mark.parametrize("record,response", [
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3})),                    # optional left out
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3, "get_area": True})),
    (REC, call("triangle_properties_get", {"side1": 5, "side2": 4, "side3": 3})),                    # dots as underscores
    (CIRCLE, call("circle_properties.get", {"radius": 2})),                                            # an int for a float
    (CIRCLE, call("circle_properties.get", {"radius": 2.0, "unit": "new york ny"})),                  # string normalised
])
def test_accepts(record, response):
    assert graders.grade(record, response) == 1.0


@pytest.mark.parametrize("record,response", [
    (REC, call("circle_properties.get", {"radius": 2})),                                              # wrong function
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4})),                                 # required missing
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 4})),                     # wrong value
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3, "color": "red"})),     # unknown parameter
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3, "get_area": 1})),      # 1 is not True
    (REC, call("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3}) * 2),                 # two calls
    (CIRCLE, call("circle_properties.get", {"radius": 2.5})), (REC, ""),
])
def test_rejects(record, response):
    assert graders.grade(record, response) == 0.0
