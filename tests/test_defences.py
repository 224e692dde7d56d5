"""SDPO's teacher kinds (T4 live, T5 base, T6 trust-region, beside T1's EMA) and the forgetting
defences (R1 replay, R2 L2 anchoring, R3 a KL-to-base penalty), each against a brute-force reference."""
import copy
import json
import os
import subprocess
import sys
import types

import pytest
import torch

import continual
import sdpo
from beyond import variants
from infra import flags
from rollout import chat_messages, encode_chat
from experiment import configurations, metrics
from world import graders, tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ids(tok, texts):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def nudged(model, seed=1, scale=0.01):
    """A copy of `model` with every weight moved a little: a student that differs from its base."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return out


def logits_one_by_one(model, prompt, response):
    """Brute force: the logits predicting each response token, one unpadded sequence at a time. [T, V]"""
    seq = torch.tensor([prompt + response])
    with torch.no_grad():
        out = model(input_ids=seq).logits[0]                   # [L, V]
    return out[len(prompt) - 1:len(prompt) - 1 + len(response)]


@pytest.fixture
def pair(tiny):
    base, tok = tiny
    return base, nudged(base), tok


def test_live_teacher_is_the_student_itself(pair):
    """(T4) live: the student's own logits on the teacher's prompt; no copy of its weights is kept."""
    base, student, tok = pair
    t_prompts, responses = ids(tok, ["What is 2+3?", "Add 4 and 9."]), ids(tok, ["\\boxed{5}", "13 then"])
    got = variants.live_logits(student, None, t_prompts, responses, tok.pad_token_id)
    for j, (p, r) in enumerate(zip(t_prompts, responses)):
        assert torch.allclose(got[j, :len(r)], logits_one_by_one(student, p, r), atol=1e-4)
    assert variants.frozen_model(student, variants.BeyondConfig(teacher="live"))["teacher"] is None


def test_trust_region_teacher_mixes_the_reference_and_student_logits(pair):
    """(T6) z_T = (1 − λ) z_ref + λ z_θ, element by element, as the official SDPO's TrustRegionTeacher."""
    base, student, tok = pair
    t_prompts, responses = ids(tok, ["What is 7*6?"]), ids(tok, ["\\boxed{42} ok"])
    for lam in (0.0, 0.05, 0.5, 1.0):
        got = variants.trust_region_logits(student, lam, base, t_prompts, responses, tok.pad_token_id)
        z_ref, z_s = logits_one_by_one(base, t_prompts[0], responses[0]), logits_one_by_one(student, t_prompts[0],
                                                                                           responses[0])
        want = [[(1 - lam) * a + lam * b for a, b in zip(ra.tolist(), rb.tolist())] for ra, rb in zip(z_ref, z_s)]
        assert torch.allclose(got[0, :len(responses[0])], torch.tensor(want), atol=1e-4), lam
    # λ = 0 is the reference alone, λ = 1 the live student
    assert not torch.allclose(logits_one_by_one(base, t_prompts[0], responses[0]),
                              logits_one_by_one(student, t_prompts[0], responses[0]), atol=1e-3)


def weights(m):
    return [p.detach().clone() for p in m.parameters()]


@pytest.mark.parametrize("kind", ["base", "trust_region", "live"])
def test_the_other_kinds_never_move_their_weights(pair, kind):
    """(T5, T6, T4) after a step only the EMA kind moves its teacher; base keeps θ_0 of the whole sequence."""
    base, student, tok = pair
    args = variants.BeyondConfig(teacher=kind, alpha=0.5)
    frozen = variants.frozen_model(student, args, base=base)
    teacher = frozen["teacher"]
    if kind == "live":
        assert teacher is None
        assert variants.after_step(frozen, student, 1, args) is False
        return
    start = weights(teacher)
    want = weights(base if kind == "base" else student)   # base: θ_0; trust-region's reference: the stage start
    assert all(torch.equal(a, b) for a, b in zip(start, want))
    assert variants.after_step(frozen, student, 1, args) is False
    assert all(torch.equal(a, b) for a, b in zip(weights(teacher), start))


def test_the_ema_kind_still_moves_by_alpha(pair):
    """(T1) the EMA kind, unchanged: θ_T ← (1 − α) θ_T + α θ."""
    base, student, tok = pair
    args = variants.BeyondConfig(teacher="ema", alpha=0.25)
    frozen = variants.frozen_model(base, args)
    teacher = frozen["teacher"]
    variants.after_step(frozen, student, 1, args)
    for t, b, s in zip(teacher.parameters(), base.parameters(), student.parameters()):
        assert torch.allclose(t, 0.75 * b + 0.25 * s, atol=1e-6)


def test_l2_anchor_value_and_gradient_by_hand(pair):
    """(R2) (λ/2) Σ ‖θ − θ_0‖², and its gradient λ (θ − θ_0)."""
    base, student, tok = pair
    lam = 0.3
    value = variants.l2_anchor(student, base, lam)
    brute = 0.0
    for p, p0 in zip(student.parameters(), base.parameters()):
        brute += sum((a - b) ** 2 for a, b in zip(p.detach().flatten().tolist(), p0.flatten().tolist()))
    assert value.item() == pytest.approx(0.5 * lam * brute, rel=1e-4)
    student.zero_grad()
    value.backward()
    for p, p0 in zip(student.parameters(), base.parameters()):
        assert torch.allclose(p.grad, lam * (p.detach() - p0), atol=1e-6)
    assert variants.l2_anchor(base, base, lam).item() == 0.0


def test_base_kl_value_and_gradient_against_brute_force(pair):
    """(R3) k3 = π_0/π_θ − log(π_0/π_θ) − 1 per sampled token, from each model's probabilities of that token
    computed one sequence at a time; its gradient against a finite difference of one weight."""
    base, student, tok = pair
    prompts, responses = ids(tok, ["What is 2+3?", "Add 4 and 9."]), ids(tok, ["\\boxed{5}", "13"])
    got = variants.base_kl_per_token(student, base, prompts, responses, tok)               # [b, T]
    for j, (p, r) in enumerate(zip(prompts, responses)):
        lp_s = torch.log_softmax(logits_one_by_one(student, p, r), -1)
        lp_0 = torch.log_softmax(logits_one_by_one(base, p, r), -1)
        for t, y in enumerate(r):
            ratio = float((lp_0[t, y] - lp_s[t, y]).exp())
            assert got[j, t].item() == pytest.approx(ratio - torch.log(torch.tensor(ratio)).item() - 1, rel=1e-4, abs=1e-5)
    assert torch.allclose(variants.base_kl_per_token(base, base, prompts, responses, tok), torch.zeros(()), atol=1e-6)
    # the gradient: d/dw of Σ k3 against (f(w + h) − f(w − h)) / 2h on one weight of the output layer
    w = student.get_output_embeddings().weight
    student.zero_grad()
    mask = torch.zeros_like(got)
    for j, r in enumerate(responses):
        mask[j, :len(r)] = 1
    (variants.base_kl_per_token(student, base, prompts, responses, tok) * mask).sum().backward()
    i, k, h = responses[0][0], 3, 1e-2
    with torch.no_grad():
        w[i, k] += h
        up = (variants.base_kl_per_token(student, base, prompts, responses, tok) * mask).sum().item()
        w[i, k] -= 2 * h
        down = (variants.base_kl_per_token(student, base, prompts, responses, tok) * mask).sum().item()
        w[i, k] += h
    assert w.grad[i, k].item() == pytest.approx((up - down) / (2 * h), rel=0.05, abs=1e-4)


def test_replay_draws_the_declared_share_graded_by_its_own_domain():
    """(R1) exactly round(r · n) of the stage's n prompts from the earlier domains, in turn; each record keeps
    its kind, and the grader of its own domain scores its reference solution 1."""
    own = tasks.builtin_split("tooluse", "train", 400, 0)
    earlier = [tasks.builtin_split("math", "train", 400, 0), tasks.builtin_split("science", "train", 400, 0)]
    for r in (0.0, 0.2, 0.25, 0.5):
        mixed = variants.replay_mix(own, earlier, r, 320, seed=7)
        assert len(mixed) == 320
        kinds = [rec["kind"] for rec in mixed]
        assert sum(k != "tooluse" for k in kinds) == round(r * 320), r
        assert kinds[0] == "tooluse"                                   # the stage's warmup reads its own kind
        if r:
            assert abs(kinds.count("math") - kinds.count("mcq")) <= 1   # the earlier domains in turn
    mixed = variants.replay_mix(own, earlier, 0.5, 40, seed=7)
    scores = graders.grade_many(mixed, [rec["solution"] for rec in mixed])
    assert scores == [1.0] * 40
    assert variants.replay_mix(own, earlier, 0.5, 40, seed=7) == mixed   # seeded: the same prompts on a rerun


def test_defences_and_kinds_run_through_continual_and_name_their_runs(tmp_path):
    """A two-stage run with every defence and a trust-region teacher: it runs, its name says what it adds,
    replay's second stage draws from the first domain, and role_of keeps it out of the paper's claims."""
    argv = ["--method", "sdpo", "--teacher", "trust_region", "--replay", "0.25", "--anchor", "0.01",
            "--base-kl", "0.1", "--stages", "math,science", "--benchmarks", "math,science", "--steps", "2",
            "--prompts-per-step", "4", "--group-size", "4", "--eval-n", "4", "--eval-k", "2", "--max-new-tokens",
            "32", "--curve-every", "0", "--no-drift", "--name", "d", "--runs-dir", str(tmp_path), "--threads", "1"]
    out = subprocess.run([sys.executable, os.path.join(ROOT, "continual.py"), *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads((tmp_path / "d" / "results.json").read_text())
    (name, run), = res["runs"].items()
    assert name == "sdpo_a0.05_tr_replay0.25_anchor0.01_basekl0.1"
    assert metrics.role_of(run) is None and metrics.defence_of(run["settings"]) == \
        "teacher trust_region, replay 0.25, anchor 0.01, base_kl 0.1"
    rows = [json.loads(line) for line in open(tmp_path / "d" / "log.jsonl")]
    assert len(rows) == 4 and all(r["loss"] == r["loss"] for r in rows)


@pytest.mark.parametrize("flag,value", [("--teacher", "bogus"), ("--replay", "1"), ("--replay", "-0.1"),
                                        ("--replay", "x"), ("--anchor", "-1"), ("--anchor", "nan"),
                                        ("--base-kl", "-0.5"), ("--base-kl", "inf")])
def test_each_defence_flag_s_bad_values_get_one_error_line(flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        continual.parse_args(["--method", "sdpo", flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and " error: " in err[-1] and flag in err[-1] and len(err) == 2, err   # usage, then the error


def test_failed_only_distils_the_failed_responses_alone_against_brute_force(pair):
    """(V1) One prompt × 4 responses, rewards [1, 1, 0, 0]: plain SDPO distils all four (each success has the other
    as its demonstration), the failed-only arm only 2 and 3; its loss is the GJSD of those two, each response's
    tokens one by one, with the successes counted as zero (S5's seq-mean over the whole batch)."""
    base, student, tok = pair
    _, args, _, _, configs, _ = continual.parse_args(["--method", "sdpo_0", "--stages", "math", "--distill", "failed"])
    args = flags.per_seed(args)[0]
    cfg = configurations.config_of("sdpo", configs[0][1], args)   # the method's knobs, beyond/'s among them
    assert isinstance(cfg, variants.BeyondConfig) and cfg.distill == "failed" and cfg.alpha == 0.0
    record = tasks.train_records("math")[0]
    texts = ["12", "12.", "7", "seven"]
    resp = [r + [tok.eos_token_id] for r in ids(tok, texts)]
    batch = {"records": [record] * 4, "texts": texts, "rewards": torch.tensor([1.0, 1.0, 0.0, 0.0]),
             "group_size": 4, "prompt_ids": [encode_chat(tok, chat_messages(record))] * 4, "response_ids": resp}
    frozen = variants.frozen_model(student, cfg, base=base)
    teacher = variants.frozen_state(frozen)
    with torch.no_grad():   # a teacher that differs from the student, so every token has a loss
        for p in teacher.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    full = sdpo.prepare_batch(student, teacher, batch, cfg, args, tok, 1)
    plan = variants.prepare_batch(student, frozen, batch, cfg, args, tok, 1)
    assert sorted(i for mb in full.steps[0]["micro_batches"] for i in mb) == [0, 1, 2, 3]
    assert sorted(i for mb in plan.steps[0]["micro_batches"] for i in mb) == [2, 3]
    assert plan.steps[0]["n_tok"] == len(resp[2]) + len(resp[3]) == plan.counts["distilled_tokens"]
    part = plan.steps[0]
    loss = sum(variants.micro_batch_loss(student, frozen, batch, plan, part, idx, cfg, args, tok)[0].item()
               for idx in part["micro_batches"])
    per_seq = []
    for i in range(4):   # brute force: the failed ones' GJSD, token by token; the successes 0
        if batch["rewards"][i] == 1:
            per_seq.append(0.0)
            continue
        t_prompt = encode_chat(tok, chat_messages(record, plan.user_texts[i]))
        s = torch.log_softmax(logits_one_by_one(student, batch["prompt_ids"][i], resp[i]), -1)
        t = torch.log_softmax(logits_one_by_one(teacher, t_prompt, resp[i]), -1)
        per_seq.append(sum(sdpo.generalized_jsd(s[j], t[j], cfg.beta).item() for j in range(len(resp[i])))
                       / len(resp[i]))
    assert args.loss_agg == "seq-mean-token-mean"
    assert loss == pytest.approx(sum(per_seq) / 4, rel=1e-4)
    assert variants.run_name(configs[0][1]).endswith("_failedonly") and variants.settings_of(args)["distill"] == "failed"
    assert "distill" not in variants.settings_of(types.SimpleNamespace(**{**vars(args), "distill": "all"}))
