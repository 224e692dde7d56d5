"""infra/knobs.py — a knob is one field of a method's config dataclass (grpo.GRPOConfig, sdpo.SDPOConfig, the
instance each method is handed) or of the run's own (infra/flags.py), with its default and its --help (tag included),
e.g. `beta: float = knob(0.5, "GJSD mix β (S3)…")`; the values allowed are checked in the dataclass's
`__post_init__`, one `must` line each. infra/flags.py makes the flags from the fields with transformers'
HfArgumentParser (the Hugging Face convention: TRL's GRPOConfig is such a dataclass). Nothing here is in the paper."""
import dataclasses


def knob(default, help_text, rule=False, sweep=False, **flag):
    """One knob: a dataclass field with its default and its --help text (HfArgumentParser reads both); rule: one of
    the release's rules the paper leaves implicit (shown by --help-all, not --help); sweep: continual.py takes a comma
    list of values, one configuration each (SDPO's α, T1); flag: what else the flag takes (aliases=[…])."""
    marks = {**({"rule": True} if rule else {}), **({"sweep": True} if sweep else {})}
    return dataclasses.field(default=default, metadata={"help": help_text, **flag, **marks})


def must(ok, message):
    """A knob's check, in its dataclass's __post_init__: False stops the command before any work, with the one line
    `error: <message>` and exit code 2 (infra/flags.check_knobs says it)."""
    if not ok:
        raise ValueError(message)
