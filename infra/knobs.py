"""infra/knobs.py — how a file declares its knobs: a dataclass whose every field is one knob, with its default, the
values allowed (checked before any work starts; the words infra/flags.knob_row reads) and its --help text, e.g.

    beta: float = knob(0.5, "in [0, 1]", "GJSD mix β (S3): 0 forward KL, 0.5 JS, 1 reverse KL")

infra/flags.py makes the flags and their checks from the fields; nothing reads a source comment. Not the paper."""
import dataclasses


def knob(default, allowed, help_text):
    """One knob: a dataclass field with its default, the values allowed and its --help text."""
    return dataclasses.field(default=default, metadata={"allowed": allowed, "help": help_text})
