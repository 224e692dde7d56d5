"""The paper's equations, each against a brute-force reference with its edge cases: read these first, beside the
paper and EQUATIONS.md (GRPO G1–G5, SDPO S1–S8 and its teacher T1–T3, evaluation A1–A3, drift A4–A8, the rollout's
packing, the razor B1–B4). The rest of tests/ guards the infrastructure: resume, the jail, bad input, the tools."""
