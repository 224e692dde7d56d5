"""experiment — above the paper's files and below continual.py: run directories and resume (rundir), the claims
and their verdicts (claims, footing), and the results as tables (tables). It imports the paper's files, never the
other way, except continual.py, which runs an experiment."""
