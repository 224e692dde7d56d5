"""The collapse's interventions: the loop-token detector on hand-written responses, loop masking
zeroes exactly the loop tokens' loss, the probe's numbers against brute force, and a CODING-only cell leaves the
stages before it byte for byte as they were."""
import argparse
import hashlib
import json
import os

import pytest
import torch

import continual
import sdpo
from conftest import config_for
from analysis import archive, probes
from world import tasks
from infra import flags
from rollout import chat_messages, encode_chat, response_logits, token_logprobs
from tools import collapse


@pytest.mark.parametrize("text,loops", [
    ("abc", "FFF"),
    ("lambdambda", "FFFFFFTTTT"),                 # the loop the CODING collapse writes
    ("(x*4444", "FFFFFTT"),                       # (4, 4) repeats from the second 4 on
    ("abab", "FFFT"),                             # (a, b) again at 3; (b, a) at 2 is new
    ("aaaa", "FFTT"),
    ("", ""), ("a", "F"),
])
def test_loop_tokens_on_hand_written_responses(text, loops):
    assert probes.loop_tokens(list(text)) == [c == "T" for c in loops]


def sdpo_args():
    """One SDPO_5% stage's settings on CODING, as continual.py gives them to train.run_steps."""
    _, args, _, _, configs, _ = continual.parse_args(["--method", "sdpo", "--stages", "coding", "--alpha", "0.05"])
    return argparse.Namespace(**{**vars(flags.per_seed(args)[0]), **configs[0][1]})


def hand_batch(tok):
    """Two CODING prompts × 2 responses, rewards [1, 0, 1, 0]: both failures have a successful sibling."""
    records = tasks.train_records("coding")[:2]
    texts = ["lambda x: x+1", "lambdambda x: x+1", "lambda x: x*2", "lambda x: (x*4444"]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    expanded = [r for r in records for _ in range(2)]
    return {"records": expanded, "texts": texts, "rewards": torch.tensor([1.0, 0.0, 1.0, 0.0]), "group_size": 2,
            "prompt_ids": [encode_chat(tok, chat_messages(r)) for r in expanded], "response_ids": ids}


def brute_loss(model, teacher, batch, plan, tok, skip_loops, beta=0.5):
    """seq-mean-token-mean of the GJSD over every response with a teacher prompt, each response's tokens one by
    one, the loop tokens left out when skip_loops."""
    per_seq = []
    for i, ids in enumerate(batch["response_ids"]):
        if plan.user_texts[i] is None:
            per_seq.append(0.0)
            continue
        t_prompt = encode_chat(tok, chat_messages(batch["records"][i], plan.user_texts[i]))
        s = torch.log_softmax(response_logits(model, [batch["prompt_ids"][i]], [ids], tok.pad_token_id)[0][0], -1)
        t = torch.log_softmax(response_logits(teacher, [t_prompt], [ids], tok.pad_token_id)[0][0], -1)
        loops = probes.loop_tokens(ids)
        kept = [pos for pos in range(len(ids)) if not (skip_loops and loops[pos])]
        per_seq.append(sum(sdpo.generalized_jsd(s[pos], t[pos], beta).item() for pos in kept) / len(kept))
    return sum(per_seq) / len(per_seq)


def plan_loss(model, teacher, batch, plan, args, tok):
    part = plan.steps[0]
    return sum(sdpo.micro_batch_loss(model, teacher, batch, plan, part, idx, config_for(sdpo.SDPOConfig, args), args, tok)[0].item()
               for idx in part["micro_batches"])


def test_loop_masking_zeroes_exactly_the_loop_tokens_loss(tiny):
    model, tok = tiny
    args, batch = sdpo_args(), hand_batch(tok)
    teacher = sdpo.init_teacher(model)
    with torch.no_grad():   # a teacher that differs from the student, so every token has a loss
        for p in teacher.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    plan = sdpo.prepare_batch(model, teacher, batch, config_for(sdpo.SDPOConfig, args), args, tok, 1)
    full = plan_loss(model, teacher, batch, plan, args, tok)
    masked_plan = collapse.loop_masked_plan(plan, batch, args)
    masked = plan_loss(model, teacher, batch, masked_plan, args, tok)
    for i, ids in enumerate(batch["response_ids"]):
        assert masked_plan.token_keep[i].tolist() == [not x for x in probes.loop_tokens(ids)]
    # responses 0 and 2 succeeded and have no other success in their group: only 1 and 3 are distilled
    assert [t is not None for t in plan.user_texts] == [False, True, False, True]
    ids = batch["response_ids"]
    n_loops = sum(probes.loop_tokens(ids[1])) + sum(probes.loop_tokens(ids[3]))
    assert n_loops > 0 and masked_plan.steps[0]["n_tok"] == len(ids[1]) + len(ids[3]) - n_loops
    assert masked == pytest.approx(brute_loss(model, teacher, batch, plan, tok, True), rel=1e-4)
    assert full == pytest.approx(brute_loss(model, teacher, batch, plan, tok, False), rel=1e-4)
    assert masked != pytest.approx(full, rel=1e-3)


def test_the_loop_probe_against_brute_force(tiny):
    model, tok = tiny
    batch = hand_batch(tok)
    teacher = sdpo.init_teacher(model)
    with torch.no_grad():
        for p in teacher.parameters():
            p.mul_(1.02)
    probe = collapse.loop_probe(model, teacher, batch, tok)
    ids = batch["response_ids"]
    loops = [probes.loop_tokens(r) for r in ids]
    assert probe["loop_share"] == pytest.approx(sum(map(sum, loops)) / sum(map(len, ids)))
    assert probe["loop_share_failed"] == pytest.approx((sum(loops[1]) + sum(loops[3])) / (len(ids[1]) + len(ids[3])))
    texts, _, _ = sdpo.build_teacher_prompts(batch["records"], batch["texts"], batch["rewards"], 2)
    on_loop, on_other, push = [], [], []
    for i in (1, 3):   # the failed responses, each with a demonstration
        t_prompt = encode_chat(tok, chat_messages(batch["records"][i], texts[i]))
        s_logits, _, targets = response_logits(model, [batch["prompt_ids"][i]], [ids[i]], tok.pad_token_id)
        t_logits = response_logits(teacher, [t_prompt], [ids[i]], tok.pad_token_id)[0]
        ratio = (token_logprobs(t_logits, targets) - token_logprobs(s_logits, targets))[0]
        for pos, is_loop in enumerate(loops[i]):
            (on_loop if is_loop else on_other).append(ratio[pos].item())
            push.append((torch.softmax(t_logits[0, pos], -1)[tok.eos_token_id] -
                         torch.softmax(s_logits[0, pos], -1)[tok.eos_token_id]).item())
    assert probe["probe_responses"] == 2
    assert probe["logratio_loop"] == pytest.approx(sum(on_loop) / len(on_loop), abs=1e-5)
    assert probe["logratio_other"] == pytest.approx(sum(on_other) / len(on_other), abs=1e-5)
    assert probe["eos_push"] == pytest.approx(sum(push) / len(push), abs=1e-6)
    # no failed response with a demonstration: only the shares
    alone = collapse.loop_probe(model, teacher, {**batch, "rewards": torch.tensor([0.0, 0.0, 0.0, 0.0])}, tok)
    assert alone["probe_responses"] == 0 and alone["logratio_loop"] is None and alone["loop_share"] == probe["loop_share"]


def tree_digest(root):
    h = hashlib.sha1()
    for folder, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            path = os.path.join(folder, f)
            h.update(path.encode() + open(path, "rb").read())
    return h.hexdigest()


def test_a_coding_only_cell_leaves_stages_1_to_3_byte_identical(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    runs = tmp_path / "regen"
    for name in ("sdpo_a0.05", "grpo"):   # stand-ins for the regenerated stage-3 checkpoints
        for k, domain in enumerate(collapse.STAGES[:3], start=1):
            path = runs / "continual-s10" / "checkpoints" / name / f"stage{k}-{domain}"
            model.save_pretrained(path)
            tok.save_pretrained(path)
    before = tree_digest(runs)
    monkeypatch.setattr(collapse, "EVAL_N", 2)
    result = collapse.run_cell(str(runs), str(tmp_path / "out"), "sdpo_5-grpo", 10, steps=1)
    assert tree_digest(runs) == before
    assert result["teacher"] == "grpo" and len(result["rows"]) == 1
    row = result["rows"][0]
    assert {"loop_share", "logratio_loop", "eos_push", "js", "distilled_token_frac"} <= set(row)
    # read back, not run again
    assert collapse.run_cell(str(runs), str(tmp_path / "out"), "sdpo_5-grpo", 10, steps=1) == result


def probe_entry(share):
    return {"loop_share": share, "loop_share_failed": share, "probe_responses": 2, "logratio_loop": -0.5,
            "logratio_other": -0.1, "eos_push": 0.01}


def test_the_seeding_stage_is_the_first_with_twice_the_bases_loop_share():
    probe = {"base": probe_entry(0.03), **{f"{c}/stage{k}": probe_entry(v) for c, vals in
             {"grpo": (0.03, 0.05, 0.059), "sdpo_0": (0.06, 0.01, 0.2), "sdpo_5": (0.02, 0.061, 0.02)}.items()
             for k, v in zip((1, 2, 3), vals)}}
    assert [collapse.seeding_stage(probe, c) for c in ("grpo", "sdpo_0", "sdpo_5")] == ["none", "math", "science"]


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f)


def test_the_probe_and_order_tables_read_what_the_runs_wrote(tmp_path, monkeypatch):
    probes = [{"base": probe_entry(0.02), **{f"{c}/stage{k}": probe_entry(0.02 * k * (1 + s)) for c in
               ("grpo", "sdpo_0", "sdpo_5") for k in (1, 2, 3)}} for s in (0, 1)]
    for s, p in enumerate(probes):
        write_json(str(tmp_path / "probe" / f"seed{s}.json"), p)
    table = collapse.probe_table(str(tmp_path))
    # sdpo_5 after stage 3: 6% and 12% on the two seeds: mean 9.0; the base's 2.0 on both
    assert "| sdpo_5/stage3 | 9.0 [" in table and "| base | 2.0 [2.0, 2.0] | -0.500 [-0.500, -0.500]" in table
    assert "sdpo_5 science, math" in table   # seed 0: 4% at stage 2; seed 1: 4% at stage 1 (≥ 2 × 2%)

    def order_run(root, name, stages, coding_acc, deg):
        per_stage = [{"domain": d, "acc": {"coding": coding_acc if d == "coding" else 0.1},
                      "degenerate": {"coding": deg if i >= stages.index("coding") else 0.0}}
                     for i, d in enumerate(stages)]
        write_json(os.path.join(root, name, "progress.json"), {"sdpo_a0.05": {"stages": per_stage}})
        write_json(os.path.join(root, name, "results.json"),
                   {"stages": stages, "runs": {"sdpo_a0.05": {"avg_forget_earlier": 0.25}}})
    monkeypatch.setattr(collapse, "REFERENCE", str(tmp_path / "reference"))
    for seed in (10, 11):
        order_run(str(tmp_path / "reference"), f"continual-s{seed}", collapse.STAGES, 0.01, 0.5)
        order_run(str(tmp_path / "order"), f"math-science-coding-tooluse-s{seed}",
                  ["math", "science", "coding", "tooluse"], 0.25 + 0.05 * (seed - 10), 0.1)
    table = collapse.orders_table(str(tmp_path), seeds=(10, 11))
    assert "| math-science-tooluse-coding (the reference) | 2 | 1.0 [1.0, 1.0] | 50.0 [50.0, 50.0] | 50.0" in table
    assert "| math-science-coding-tooluse | 2 | 27.5 [" in table and "math-tooluse-science-coding" not in table
    monkeypatch.setattr(collapse, "REFERENCE", str(tmp_path / "none"))
    assert collapse.orders_table(str(tmp_path / "none"), seeds=(10,)) == ""   # nothing run: no table


def test_the_figures_draw_from_the_committed_cells(tmp_path):
    pytest.importorskip("matplotlib")
    made = collapse.figures(archive.materialized(collapse.COMMITTED), str(tmp_path))
    assert sorted(os.path.basename(m) for m in made) == ["loop_stages.png", "loop_steps.png"]
    assert all(open(m, "rb").read(4) == b"\x89PNG" for m in made)
    with pytest.raises(SystemExit, match="no finished cell"):
        collapse.figures(str(tmp_path / "empty"), str(tmp_path))
