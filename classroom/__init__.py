"""classroom — the class: every exercise of LAB.md in one command (lab), the notebook (classroom/lab.ipynb), the answers
(classroom/SOLUTIONS.md), and the per-token view of what each method tells each token (tokens)."""
