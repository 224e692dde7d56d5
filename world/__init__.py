"""world — the built-in world the experiment runs on: its tasks and benchmarks (tasks), their graders (graders),
the jail CODING's programs run in (sandbox), and the tiny base models pretrained on it (world/tiny_model/,
world/tiny_model_think/). The floor below everything: it imports nothing of the project's."""
