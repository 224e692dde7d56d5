"""infra/steps.StepLog, the loop's bookkeeping: a step with no token in the loss is said once above the bar and
counted at the stage's end, not printed on the bar's line every step; other warnings still show."""
import os
import signal
import sys
import threading
import warnings

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from infra.distributed import EmptyLossWarning  # noqa: E402
from infra.steps import StepLog  # noqa: E402
from infra.stops import sigterm_as_ctrl_c  # noqa: E402


def run_steps(n, empty_steps, other=False):
    """n steps of a one-weight model; the steps in empty_steps warn as whole_batch does on an empty batch."""
    model = torch.nn.Linear(1, 1)
    batch = {"response_ids": [[1, 2]], "rewards": torch.tensor([0.0])}
    with StepLog(model, n, desc="sdpo 4:coding") as log:
        for step in log.steps():
            log.sampled()
            if step + 1 in empty_steps:
                warnings.warn(f"step {step + 1}", EmptyLossWarning)
            if other and step == 0:
                warnings.warn("something else", RuntimeWarning)
            log.step(batch, {"js": 0.0})


def test_empty_steps_are_said_once_and_counted(capsys):
    run_steps(5, {2, 3, 5})
    err = capsys.readouterr().err
    assert err.count("no token in the loss") == 2          # the first in full, then the count
    assert "warning: sdpo 4:coding: step 2: no token in the loss (SDPO" in err
    assert "warning: sdpo 4:coding: 3 of 5 steps had no token in the loss (steps 2, 3, 5)" in err


def test_one_empty_step_is_not_counted_again_and_none_says_nothing(capsys):
    run_steps(3, {1})
    err = capsys.readouterr().err
    assert err.count("no token in the loss") == 1 and "of 3 steps" not in err
    run_steps(3, set())
    assert "warning" not in capsys.readouterr().err.lower()


def test_other_warnings_still_show(capsys):
    run_steps(2, set(), other=True)
    err = capsys.readouterr().err
    assert "RuntimeWarning: something else" in err and "no token" not in err


def test_a_busy_machine_is_said_from_the_steps_own_seconds():
    """Steps much slower per response token than the stage's first say so once; longer responses alone
    (the same seconds per token) do not."""
    from infra.steps import busy_note

    def rows(seconds, lengths):
        return [{"rollout_s": s * 0.8, "update_s": s * 0.2, "response_len": n} for s, n in zip(seconds, lengths)]
    assert busy_note(rows([1.0] * 9, [10] * 9)) is None                          # too few steps to say
    assert busy_note(rows([1.0] * 10, [10] * 10)) is None                        # as fast as ever
    assert busy_note(rows([1.0] * 5 + [3.0] * 5, [10] * 5 + [30] * 5)) is None   # 3× the seconds for 3× the tokens
    note = busy_note(rows([1.0] * 5 + [3.0] * 5, [10] * 10))
    assert note and "3.0× as long per response token" in note and "300 ms against 100 ms" in note


def test_a_stop_after_the_last_steps_boundary_is_not_lost():
    """A Ctrl-C or SIGTERM that lands after the last step's check (the loop ending, the bar closing) still stops
    the run when the loop's block ends: before, it was swallowed and the run went on to its end, exit 0."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        model, batch = torch.nn.Linear(1, 1), {"response_ids": [[1, 2]], "rewards": torch.tensor([0.0])}
        with pytest.raises(KeyboardInterrupt):
            with StepLog(model, 2) as log:
                for step in log.steps():
                    log.sampled()
                    log.step(batch, {"js": 0.0})
                os.kill(os.getpid(), sig)            # after the last step's check, inside the block
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # the handlers are given back


def test_an_ignored_ctrl_c_stays_ignored_in_the_steps_too():
    """Started with SIGINT ignored (`cmd &` in a script), a run ignores it everywhere, as Python itself does: the
    steps did not, so a Ctrl-C stopped the steps but not the evaluation."""
    model, batch = torch.nn.Linear(1, 1), {"response_ids": [[1, 2]], "rewards": torch.tensor([0.0])}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StepLog(model, 2) as log:
            for step in log.steps():
                log.sampled()
                os.kill(os.getpid(), signal.SIGINT)
                log.step(batch, {"js": 0.0})
        assert log.bar.n == 2 and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    except KeyboardInterrupt:   # (caught here: a KeyboardInterrupt would stop pytest itself)
        pytest.fail("an ignored Ctrl-C stopped the steps")
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_sigterm_becomes_ctrl_c_unless_it_is_ignored_or_off_the_main_thread():
    old = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sigterm_as_ctrl_c()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN           # ignored from the start: left so
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        t = threading.Thread(target=sigterm_as_ctrl_c)
        t.start(), t.join()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL           # another thread: no error, no change
        sigterm_as_ctrl_c()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_kill(threading.get_ident(), 0)                   # (the handler runs here at the latest)
    finally:
        signal.signal(signal.SIGTERM, old)


def test_an_empty_batch_is_named_by_its_own_step():
    """whole_batch names an empty batch by train.update's step, counted from 1 as the bar and log.jsonl count them
    (it said step 2 of the first batch)."""
    import sdpo
    from infra.distributed import whole_batch
    empty = sdpo.SDPOPlan(steps=[{"micro_batches": [], "n_tok": 0, "n_seq": 0}], counts={}, user_texts=[], token_keep=[])
    for step in (1, 7):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with whole_batch(empty, None, step):   # (said on entering, before the batch's steps run)
                inside = [str(w.message) for w in said if w.category is EmptyLossWarning]
        assert inside == [f"step {step}"] and empty.steps[0]["n_tok"] == 0
        assert [str(w.message) for w in said if w.category is EmptyLossWarning] == [f"step {step}"]
