"""infra/stops.py — Ctrl-C and SIGTERM stop a run at a step boundary, so that a saved state is never half a step."""
import signal
import threading


# ----------------------------------------------------------------------------------------------
# Ctrl-C at a step boundary
# ----------------------------------------------------------------------------------------------
class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training, raised at a step boundary: `completed_steps` steps are fully applied."""

    def __init__(self, completed_steps):
        super().__init__(completed_steps)
        self.completed_steps = completed_steps


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)   # Ctrl-C, and what kill, SLURM's scancel and Kubernetes send


def sigterm_as_ctrl_c():
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so every stop runs the same clean-up (the state saved,
    one line); outside the step loop too (an evaluation, a drift measurement). Main thread only."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, handler)   # (an ignored SIGTERM stays ignored, as StepBoundarySigint leaves it)


class StepBoundarySigint:
    """While active, the first Ctrl-C (SIGINT) or SIGTERM only sets `requested`; the loop stops at the end of
    the current step, so a saved state is never half an optimizer step. A second one interrupts at once."""

    def __enter__(self):
        self.requested = False
        self._old = {s: signal.getsignal(s) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}

        def handler(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
        try:
            for s in self._old:   # (one ignored, as `cmd &` in a script leaves SIGINT, stays so)
                signal.signal(s, handler)
        except ValueError:  # not the main thread: leave the signals as they are
            self._old = None
        return self

    def __exit__(self, exc_type, *exc):
        for s, old in (self._old or {}).items():
            signal.signal(s, old)
        if self.requested and exc_type is None:   # it came after the last step's boundary: still a stop, not lost
            raise KeyboardInterrupt
