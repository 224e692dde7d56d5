"""The large-model code path, exercised here without a network: hub ids, dtypes, gradient
accumulation and checkpointing, prompt-length limits, the thinking switch."""
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import types

import pytest
import torch

import rollout
import sdpo
from conftest import config_for
import train
from infra import models
from infra.errors import BadData
from equations.test_grpo import fake_batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hub_cache_with_tiny(root, repo="local-org/tiny-llama", commit="0" * 40):
    """The Hugging Face cache layout for `repo` holding the committed tiny model (what a download leaves)."""
    base = os.path.join(root, "models--" + repo.replace("/", "--"))
    snap = os.path.join(base, "snapshots", commit)
    shutil.copytree(models.TINY_DIR, snap)
    os.makedirs(os.path.join(base, "refs"))
    with open(os.path.join(base, "refs", "main"), "w") as f:
        f.write(commit)
    return repo


def test_hub_id_code_path_loads_from_the_cache_offline(tmp_path):
    repo = hub_cache_with_tiny(str(tmp_path))
    code = ("import torch, rollout; from infra import models; m, t = models.load_model(%r, 'cpu'); "
            "ids = rollout.sample(m, t, [rollout.encode_chat(t, [{'role': 'user', 'content': 'hi'}])], 2, 5); "
            "print('ok', type(m).__name__, m.dtype, len(ids))") % repo
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path), HF_HOME=str(tmp_path / "home"),
               PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    assert "ok LlamaForCausalLM torch.float32 2" in out.stdout


def sdpo_grads(model, tok, batch, micro_batch=0, grad_checkpointing=False, loss_agg="token-mean", mask_ratio=0.0):
    m = copy.deepcopy(model)
    if grad_checkpointing:
        getattr(m, "activation_checkpointing_enable", m.gradient_checkpointing_enable)()
        m.train()
    teacher = sdpo.init_teacher(model)
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    args = types.SimpleNamespace(cot=False, micro_batch=micro_batch, beta=0.5, topk=None, max_grad_norm=1e9,
                                 alpha=0.0, refresh_every=0, gamma=1.0, loss_agg=loss_agg, mask_ratio=mask_ratio,
                                 feedback=False, mini_batch_order="balanced", sample_blocks=0)
    torch.manual_seed(3)   # (S7) the step's masking draw, as train.run_steps seeds it
    train.update(m, opt, sdpo, config_for(sdpo.SDPOConfig, args), teacher, batch, args, tok, 1)
    return torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_agg,mask_ratio", [("token-mean", 0.0), ("seq-mean-token-mean", 0.0),
                                                 ("seq-mean-token-mean", 0.4)])
def test_sdpo_gradient_accumulation_equals_the_full_batch(tiny, loss_agg, mask_ratio):
    model, tok = tiny
    batch = fake_batch(tok)
    full = sdpo_grads(model, tok, batch, loss_agg=loss_agg, mask_ratio=mask_ratio)
    assert full.abs().max().item() > 0
    for size in (1, 3):
        micro = sdpo_grads(model, tok, batch, micro_batch=size, loss_agg=loss_agg, mask_ratio=mask_ratio)
        assert (micro - full).abs().max().item() < 1e-6


def test_gradient_checkpointing_gives_the_same_gradient(tiny):
    model, tok = tiny
    batch = fake_batch(tok)
    full = sdpo_grads(model, tok, batch)
    assert (sdpo_grads(model, tok, batch, grad_checkpointing=True) - full).abs().max().item() < 1e-5


def test_max_prompt_len_drops_long_prompts(tiny, capsys):
    _, tok = tiny
    recs = [{"prompt": "short", "kind": "math", "answer": "1"}, {"prompt": "x" * 300, "kind": "math", "answer": "1"}]
    assert rollout.drop_long_prompts(tok, recs, 0) == recs
    assert rollout.drop_long_prompts(tok, recs, 64, "prompts") == recs[:1]
    assert "dropped 1 of 2 prompts" in capsys.readouterr().out
    with pytest.raises(ValueError, match="every prompt"):
        rollout.drop_long_prompts(tok, recs, 3)


def test_prompt_room_is_the_positions_less_the_response(tiny):
    """The prompt tokens a model's positions leave beside the response: the tiny model's 512 less
    --max-new-tokens; none left is refused in one line; a config that names no positions sets no limit."""
    model, _ = tiny
    assert model.config.max_position_embeddings == 512
    assert rollout.prompt_room(model, 64) == 448 and rollout.prompt_room(model, 511) == 1
    with pytest.raises(BadData, match="--max-new-tokens 512 leaves no room for a prompt in the model's 512 positions"):
        rollout.prompt_room(model, 512)
    assert rollout.prompt_room(types.SimpleNamespace(config=types.SimpleNamespace()), 10_000) == 0


def test_prompt_fits_agrees_with_the_token_count(tiny):
    """The byte screen never keeps a prompt the tokenizer counts longer: against the brute-force count, for plain,
    multi-byte and mixed prompts at every limit around their lengths."""
    _, tok = tiny
    texts = ["2+2", "x" * 300, "é" * 80, "数学" * 40, "a b " * 60 + "🙂" * 10, " ".join(str(i) for i in range(90))]
    for text in texts:
        record = {"prompt": text, "kind": "math", "answer": "1"}
        n = len(rollout.encode_chat(tok, rollout.chat_messages(record)))
        for limit in range(max(1, n - 3), n + 4):
            assert rollout.prompt_fits(tok, record, limit) == (n <= limit), (text[:20], n, limit)


def test_a_prompt_past_the_positions_is_dropped_with_a_word(tiny, capsys):
    """A 10,001-token record for a 512-position model is dropped at once, saying why (it ran for 6 minutes with no
    word); every prompt too long is one BadData line (the run's handler prints it as `error:`)."""
    model, tok = tiny
    recs = [{"prompt": "short", "kind": "math", "answer": "1"}, {"prompt": "x " * 10_000, "kind": "math", "answer": "1"}]
    assert len(rollout.encode_chat(tok, rollout.chat_messages(recs[1]))) > 10_000
    t0 = time.time()
    assert rollout.drop_long_prompts(tok, recs, 0, "prompts", rollout.prompt_room(model, 64)) == recs[:1]
    assert time.time() - t0 < 5
    assert "the model's positions less --max-new-tokens (448 tokens): dropped 1 of 2 prompts" in capsys.readouterr().out
    assert rollout.drop_long_prompts(tok, recs, 64, "prompts", 448) == recs[:1]   # the smaller limit says why
    assert "--max-prompt-len 64: dropped 1 of 2 prompts" in capsys.readouterr().out
    with pytest.raises(BadData, match="every prompt of the prompts is longer"):
        rollout.drop_long_prompts(tok, recs[1:], 0, "prompts", 448)


def test_a_record_file_whose_prompts_all_pass_the_positions_ends_in_one_line(tmp_path):
    """continual.py over a record file whose every prompt is longer than the tiny model's positions allow: one
    `error:` line naming why, exit 1, no traceback (the file's test prompts, evaluated first, are the same records)."""
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps({"prompt": "x " * 600 + str(i), "kind": "math", "answer": "1"}) + "\n"
                            for i in range(4)))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), "--method", "grpo", "--stages", str(data),
                          "--benchmarks", "math", "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
                          "--mini-batches", "1", "--eval-n", "2", "--eval-k", "1", "--max-new-tokens", "8", "--no-drift",
                          "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-1500:]
    assert out.stderr.strip().splitlines()[-1] == (f"error: the model's positions less --max-new-tokens (504 tokens): "
                                                   f"every prompt of the {data} test prompts is longer. Completed stages "
                                                   f"are kept: change the flag or the data and rerun")


def test_enable_thinking_reaches_templates_that_take_it(tiny):
    """A Qwen3-style template switches on enable_thinking; the run-wide setting is used by default."""
    _, tok = tiny
    tok = copy.deepcopy(tok)
    tok.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                         "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}")
    msgs = [{"role": "user", "content": "q"}]
    plain = tok.decode(rollout.encode_chat(tok, msgs))
    assert plain == "q"
    assert tok.decode(rollout.encode_chat(tok, msgs, enable_thinking=False)) == "q<think></think>"
    tok.enable_thinking = False          # what load_model(..., enable_thinking=False) sets for the run
    assert tok.decode(rollout.encode_chat(tok, msgs)) == "q<think></think>"
    assert tok.decode(rollout.encode_chat(tok, msgs, enable_thinking=True)) == "q"   # an explicit value wins


def test_load_model_keeps_the_thinking_switch_on_the_tokenizer():
    _, tok = models.load_model("tiny", enable_thinking=False)
    assert tok.enable_thinking is False
    assert models.load_model("tiny")[1].enable_thinking is None
