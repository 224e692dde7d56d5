"""experiment — above the paper's files and below continual.py: run directories and resume (rundir), what a run
reports (report, metrics) and its results as tables (tables). It imports the paper's files, never the other way,
except continual.py, which runs an experiment. The claims over seeds are analysis/'s, which no run imports."""
