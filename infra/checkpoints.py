"""infra/checkpoints.py — files that survive a crash: atomic JSON and checkpoints (written to a temporary sibling,
then renamed), checksums, the optimizer's and the teacher's states, and the run's append-only log."""
import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors import SafetensorError   # (what save_pretrained raises on a full disk)

from infra import errors
from infra.distributed import barrier, full_state_dict, is_main, is_sharded


# Optimizer and teacher states beside a checkpoint. One process: optimizer.pt and teacher.pt (torch.save).
# Sharded (torchrun): optimizer/ and teacher/, written by torch.distributed.checkpoint, one file per rank
# holding that rank's shard: no rank ever holds the whole state (AdamW's is ~58 GB for a 7B model).
def state_path(ckpt_dir, name, sharded):
    """Where a state ('optimizer' or 'teacher') lives: NAME.pt (one process) or the directory NAME/ (sharded)."""
    return os.path.join(ckpt_dir, name if sharded else name + ".pt")


def save_states(ckpt_dir, model, opt=None, teacher=None):
    """Write the optimizer's and the teacher's states into ckpt_dir (sharded: every rank must call it)."""
    sharded = is_sharded(model)
    if not sharded:
        for name, obj in (("optimizer", opt), ("teacher", teacher)):
            if obj is not None:
                torch.save(obj.state_dict(), state_path(ckpt_dir, name, False))
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    if opt is not None:
        dcp.save(get_optimizer_state_dict(model, opt), checkpoint_id=state_path(ckpt_dir, "optimizer", True))
    if teacher is not None:
        dcp.save(get_model_state_dict(teacher), checkpoint_id=state_path(ckpt_dir, "teacher", True))


def load_optimizer(ckpt_dir, model, opt):
    """AdamW's state from ckpt_dir into `opt` (sharded: each rank reads its own shard)."""
    if not is_sharded(model):
        return opt.load_state_dict(torch.load(state_path(ckpt_dir, "optimizer", False), weights_only=True))
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
    state = get_optimizer_state_dict(model, opt)      # (the layout to fill: this rank's shards)
    dcp.load(state, checkpoint_id=state_path(ckpt_dir, "optimizer", True))
    set_optimizer_state_dict(model, opt, state)


def load_teacher(ckpt_dir, teacher):
    """The teacher's weights from ckpt_dir into `teacher` (a copy of the student, sharded like it)."""
    if not is_sharded(teacher):
        return teacher.load_state_dict(torch.load(state_path(ckpt_dir, "teacher", False), weights_only=True))
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    state = get_model_state_dict(teacher)
    dcp.load(state, checkpoint_id=state_path(ckpt_dir, "teacher", True))
    set_model_state_dict(teacher, state)


def check_states(ckpt_dir, names, sharded):
    """Raise if a state is missing or unreadable, without loading it whole: a .pt file is memory-mapped
    (nothing read into memory), a sharded one's metadata is read."""
    for name in names:
        path = state_path(ckpt_dir, name, sharded)
        if sharded:
            from torch.distributed.checkpoint import FileSystemReader
            FileSystemReader(path).read_metadata()
        else:
            torch.load(path, mmap=True, weights_only=True)


# ----------------------------------------------------------------------------------------------
# Files that survive a crash
# ----------------------------------------------------------------------------------------------
def save_checkpoint(model, tok, out_dir, extra=None, opt=None, teacher=None):
    """One Hugging Face directory (`from_pretrained` loads it), written atomically: everything goes into
    a temporary sibling directory, then it is renamed into place. A crash at any moment leaves either
    the old checkpoint or the new one, never half of one.

    Sharded: every rank must call it (the weights are gathered on rank 0, which alone writes them; each
    rank writes its own shard of the optimizer and teacher states, save_states).
    `extra`: optional {filename: small object} saved with torch.save beside the weights (rank 0);
    `opt`, `teacher`: the optimizer and the teacher whose states go with it.
    """
    state = full_state_dict(model) if is_sharded(model) else None
    if state is not None and is_main():   # tied embeddings: the LM head is the input embedding, saved once
        out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
        if out_emb is not None and out_emb.weight is in_emb.weight:
            head = next(name for name, m in model.named_modules() if m is out_emb)
            state.pop(f"{head}.weight", None)
    out_dir = out_dir.rstrip("/")
    tmp, old = out_dir + ".tmp", out_dir + ".old"
    if is_main() and os.path.isdir(out_dir) and os.listdir(out_dir) and not is_checkpoint_dir(out_dir):
        raise FileExistsError(errno.EEXIST, "exists and is not a checkpoint (it has no config.json): nothing was "
                              "replaced", out_dir)
    if is_main():
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    barrier()
    save_states(tmp, model, opt, teacher)
    barrier()
    if is_main():
        try:
            model.save_pretrained(tmp, state_dict=state)
            tok.save_pretrained(tmp)
            for name, obj in (extra or {}).items():
                torch.save(obj, os.path.join(tmp, name))
            write_checksums(tmp)   # what a later rerun checks the directory against (damaged_files)
        except (OSError, SafetensorError, RuntimeError) as e:   # a full disk (safetensors' own error, torch.save's)
            shutil.rmtree(tmp, ignore_errors=True)             # nothing half-written is left; the old one stands
            reason = getattr(e, "strerror", None) or str(e).strip().splitlines()[-1][:200]
            raise OSError(getattr(e, "errno", None) or errno.EIO, f"the checkpoint could not be written ({reason})",
                          out_dir) from None
        if os.path.exists(out_dir):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    barrier()


CHECKSUMS = "checksums.json"


def is_checkpoint_dir(path):
    """A directory save_checkpoint may replace: one that holds a saved model (its config.json or checksums)."""
    return any(os.path.isfile(os.path.join(path, f)) for f in ("config.json", CHECKSUMS))


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_checksums(directory):
    """checksums.json: {relative path: sha256} of every file a checkpoint directory holds, written last."""
    digests = {}
    for root, _, files in os.walk(directory):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if rel != CHECKSUMS:
                digests[rel] = file_digest(os.path.join(root, name))
    with open(os.path.join(directory, CHECKSUMS), "w") as f:
        json.dump(digests, f, indent=1, sort_keys=True)


def write_result_checksum(path):
    """<path>.sha256 beside a finished result (results.json): the summaries check the file against it."""
    atomic_text(path + ".sha256", file_digest(path) + "\n")


def damaged_files(directory):
    """The files of a saved checkpoint that are not as they were saved: [(file, 'missing' | 'changed')], [] if
    all are; None if it records no checksums (saved before they were recorded: nothing to check against)."""
    try:
        with open(os.path.join(directory, CHECKSUMS)) as f:
            digests = json.load(f)
        assert isinstance(digests, dict)
    except FileNotFoundError:
        return None
    except (ValueError, AssertionError, OSError):
        return [(CHECKSUMS, "changed")]
    bad = []
    for rel, digest in sorted(digests.items()):
        path = os.path.join(directory, rel)
        try:
            if file_digest(path) != digest:
                bad.append((rel, "changed"))
        except OSError:
            bad.append((rel, "missing"))
    return bad


def stage_checkpoint(run_dir, run_name, k, domain):
    """Stage k's (0-based) checkpoint directory in a continual.py run directory. Readers take it from the
    run directory they were given, not from the path progress.json recorded (which is relative to where
    the run was started): a run resumes, and drift.py measures it, from any working directory."""
    return os.path.join(run_dir, "checkpoints", run_name, f"stage{k + 1}-{os.path.basename(domain)}")


def with_stage_checkpoints(progress, run_dir):
    """progress.json's content with every stage's "checkpoint" found in run_dir (stage_checkpoint)."""
    for run_name, run in progress.items():
        for k, st in enumerate(run.get("stages", []) if run_name != "base" else []):
            st["checkpoint"] = stage_checkpoint(run_dir, run_name, k, st["domain"])
    return progress


def append_jsonl(path, row):
    """One JSON line per step (flushed, so a killed run keeps every finished step)."""
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def read_jsonl(path):
    """(rows, bad line numbers) of a JSON-lines file: a line cut by a kill, or garbage, is reported, not fatal."""
    rows, bad = [], []
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not an object")
                rows.append(row)
            except ValueError:
                bad.append(n)
    return rows, bad


UMASK = os.umask(0o022)   # the process's file-creation mask (read by setting it, then put back at once)
os.umask(UMASK)


def atomic_text(path, text):
    """A small text file written whole or not at all (a temporary sibling, then a rename)."""
    write_atomically(path, lambda f: f.write(text))


def atomic_json(path, obj):
    """Write JSON to path.tmp, then rename: readers see the old file or the new one. Rank 0 only."""
    if not is_main():
        return
    write_atomically(path, lambda f: json.dump(obj, f, indent=1))


def write_atomically(path, write):
    """write(f) into a temporary file of this writer's own beside path (tempfile.mkstemp: two writers of one file
    never share it), then rename it over path: a reader sees the old file or the new one, whole. If any of it
    fails, the temporary file is removed and the error names path (say, a directory where the file belongs)."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=os.path.dirname(path) or ".")
        os.fchmod(fd, 0o666 & ~UMASK)   # (mkstemp's 0600 would make the file private; keep what open() gives)
        with os.fdopen(fd, "w") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError, TypeError):
            os.remove(tmp)
        raise OSError(e.errno, e.strerror, path) from e


# ----------------------------------------------------------------------------------------------
# The evaluation's saved responses (the drift measures compare them: drift.py)
# ----------------------------------------------------------------------------------------------
def responses_path(run_dir, tag):
    return os.path.join(run_dir, "responses", f"{tag}.json")


def save_responses(run_dir, tag, responses):
    """The evaluation samples of one model ({benchmark: {'texts', 'hit_limit'}}), written atomically."""
    path = responses_path(run_dir, tag)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, lambda f: json.dump(responses, f))


def read_responses(path):
    """The responses saved in path; raises ValueError / AssertionError / TypeError if it is damaged."""
    with open(path) as f:
        responses = json.load(f)
    assert isinstance(responses, dict) and all(isinstance(r, dict) and "texts" in r for r in responses.values()), \
        "not saved responses"
    return responses


def load_responses(run_dir, tag):
    """The evaluation samples saved by save_responses. A missing or damaged file stops with what to do."""
    path = responses_path(run_dir, tag)
    if not os.path.isfile(path):
        sys.exit(f"error: {path} is missing (runs before drift tracking kept no responses; rerun continual.py)")
    try:
        return read_responses(path)
    except (ValueError, AssertionError, TypeError, AttributeError) as e:
        print(f"error: {path} is damaged ({errors.one_line(e)}); delete it and rerun the same command: "
              + ("the base model is evaluated again (same prompts, same result)" if tag == "base" else
                 "or rerun with --overwrite to start the run again"), file=sys.stderr)
        sys.exit(1)
