"""machinery — what the experiment stands on but the paper does not describe: the built-in world's tasks and
graders (tasks), its tiny base model (tiny, machinery/tiny_model/), the jail CODING's programs run in (sandbox), the flags
and their checks (flags), run directories and resume (runs), figures (plots), the claims' verdicts (claims), and the
plumbing for several processes, Ctrl-C and atomic files (infra)."""
