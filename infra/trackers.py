"""infra/trackers.py — a run where researchers look (`--report-to`, TRL's name and values): TensorBoard or trackio,
beside the run directory's own log.jsonl and figures. Nothing here is in the paper.

    --report-to tensorboard   event files in <run directory>/tensorboard/<configuration>/: `tensorboard --logdir runs`
    --report-to trackio       trackio's local store (TRACKIO_DIR, default ~/.cache/huggingface/trackio), one
                              project per run directory: `trackio show --project <its name>`

Each configuration of a run is one tracked run, logged:
  per step   train/<key> for every number of the step's log line (reward, js, entropy, teacher_entropy,
             demo_frac, feedback_frac, update_rel, lr, …), at the step counted over every stage;
  per stage  stage/acc/<benchmark> for every benchmark, stage/G (the gain on the stage's own domain, A3) and
             stage/F (the mean forgetting of the earlier domains, A3), at the stage's last step;
  once       the run's configuration as hyper-parameters.
The packages are optional (requirements-trackers.txt); asked for without them, a command says what to install.
"""
import importlib.util
import json
import os
import tempfile

CHOICES = ("none", "tensorboard", "trackio")
PACKAGES = {"tensorboard": "tensorboard", "trackio": "trackio"}


def check_available(error, kind):
    """error(message) unless --report-to's package is there and trackio's store writable (trackio fails silently)."""
    if kind != "none" and importlib.util.find_spec(PACKAGES[kind]) is None:
        error(f"--report-to {kind} needs the {PACKAGES[kind]} package: pip install -r requirements-trackers.txt "
              f"(or pip install {PACKAGES[kind]})")
    if kind == "trackio":
        from trackio.utils import TRACKIO_DIR   # (optional: imported when asked for) TRACKIO_DIR or HF_HOME/trackio
        try:
            os.makedirs(TRACKIO_DIR, exist_ok=True)
            os.rmdir(tempfile.mkdtemp(dir=TRACKIO_DIR))   # the only sure test (root is told "writable" and refused)
        except OSError as e:
            error(f"--report-to trackio: its store {TRACKIO_DIR} cannot be written ({e.strerror}); set TRACKIO_DIR")


def numbers(row):
    """The row's numbers, by name (booleans and lists left out)."""
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class Tracker:
    """One tracked run. kind: "tensorboard" or "trackio"; directory: the run directory; name: the configuration's
    name; config: its settings, logged once as hyper-parameters."""

    def __init__(self, kind, directory, name, config):
        self.kind = kind
        config = json.loads(json.dumps(config, default=str))   # plain values only
        if kind == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter   # (tensorboard is optional: imported when asked for)
            self.writer = SummaryWriter(os.path.join(directory, "tensorboard", name))
            flat = {k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in config.items()}
            self.writer.add_hparams(flat, {}, run_name=".")
            self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(flat.items())), 0)
        else:
            import trackio   # (trackio is optional: imported when asked for)
            self.run = trackio.init(project=os.path.basename(os.path.abspath(directory)), name=name, config=config,
                                    resume="allow", embed=False)

    def log(self, values, step):
        if self.kind == "tensorboard":
            for key, value in values.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        else:
            self.run.log(values, step=step)

    def step(self, row, step):
        """One training step's log line (its numbers, as train/<key>) at step `step`."""
        self.log({f"train/{k}": v for k, v in numbers(row).items() if k != "step"}, step)

    def stage(self, acc, gain, forget, step):
        """A stage's end: every benchmark's accuracy, its G on its own domain and F on the earlier ones (None: not
        defined, left out), at step `step`."""
        values = {f"stage/acc/{b}": float(a) for b, a in acc.items()}
        values.update({k: float(v) for k, v in (("stage/G", gain), ("stage/F", forget)) if v is not None})
        self.log(values, step)

    def close(self):
        if self.kind == "tensorboard":
            self.writer.close()
        else:
            self.run.finish()


def open_tracker(kind, directory, name, config):
    """A Tracker, or None for --report-to none."""
    return None if kind in (None, "none") else Tracker(kind, directory, name, config)
