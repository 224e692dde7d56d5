"""infra/knobs.py — a knob is one field of a file's Knobs or Protocol dataclass: its default, the values allowed (the
words infra/flags.knob_row reads and checks) and its --help, e.g. `beta: float = knob(0.5, "in [0, 1]", "GJSD mix
β (S3)…")`; infra/flags.py makes the flags from the fields. Nothing here is in the paper."""
import dataclasses


def knob(default, allowed, help_text):
    """One knob: a dataclass field with its default, the values allowed and its --help text."""
    return dataclasses.field(default=default, metadata={"allowed": allowed, "help": help_text})
