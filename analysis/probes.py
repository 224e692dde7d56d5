"""analysis/probes.py — what the research tools measure of a model beyond a run's own measures: how far apart two
benchmarks are (§4's intermediate distance), the teacher shown the grader's feedback (S8's reprompt, the twin of
evaluate.teacher_check), and §5's loop tokens. tools/reference.py, tools/adequacy.py, tools/coding_ablation.py,
tools/collapse.py and classroom/tokens.py take them; a run never does."""
import torch

from drift import embed_texts
from infra.speedups import SAMPLE_BATCH
from rollout import acc_at_k, fill_reprompt
from world import graders


def benchmark_distances(embedder, tok, responses, batch_size=SAMPLE_BATCH):
    """How far apart two benchmarks are, for "forgetting is strongest at an intermediate distance" (§4,
    Table D.4; the paper's Figure C.1 does the same with its own embeddings): the cosine distance
    1 − cos(ē_a, ē_b) between the benchmarks' mean response embeddings ē = mean_i e(y_i) (A7's e).
    responses: {benchmark: {'texts': [...]}} of one model (the base's). Returns {a: {b: distance}}."""
    names = sorted(responses)
    means = torch.stack([embed_texts(embedder, tok, responses[b]["texts"], batch_size).mean(0) for b in names])   # [N, H]
    cos = torch.nn.functional.cosine_similarity(means[:, None, :], means[None, :, :], dim=-1)                   # [N, N]
    return {a: {b: round(max(0.0, float(1 - cos[i, j])), 6) for j, b in enumerate(names)} for i, a in enumerate(names)}


@torch.no_grad()
def feedback_check(model, tok, records, k=8, max_new_tokens=64, sample_batch=SAMPLE_BATCH):
    """The teacher shown feedback (S8) instead of a demonstration: for each prompt's first failed sample that
    its grader has a report on, Acc@k of the same model with that report in S8's reprompt, against Acc@k
    without it on the same prompts. teacher_check checks the demonstration; this checks the feedback."""
    _, per_prompt, responses, scores, _ = acc_at_k(model, tok, records, k, max_new_tokens, batch_size=sample_batch)
    shown, reprompts, before = [], [], []
    for i, rec in enumerate(records):
        failed = [r for r, s in zip(responses[i * k:(i + 1) * k], scores[i * k:(i + 1) * k]) if s == 0.0]
        note = next((n for n in (graders.feedback(rec, r) for r in failed) if n), None)
        if note:
            shown.append(rec)
            reprompts.append(fill_reprompt(rec["prompt"], feedback=note))
            before.append(per_prompt[i])
    if not shown:
        return {"prompts_with_feedback": 0, "without": None, "with_feedback": None}
    with_fb, _, _, _, _ = acc_at_k(model, tok, shown, k, max_new_tokens, prompts=reprompts, batch_size=sample_batch)
    return {"prompts_with_feedback": len(shown), "without": sum(before) / len(before), "with_feedback": with_fb}


def loop_tokens(ids):
    """(§5's artifact loop) [bool per token]: token t is a loop token when its bigram with its predecessor,
    (ids[t−1], ids[t]), already occurred earlier in the same response. The first token never is.

    Example: ids of "lambdambda" -> l a m b d a m b d a: 'm' at 6 repeats (a, m) from 1–2, then 'b', 'd', 'a'
    repeat too: [F, F, F, F, F, F, T, T, T, T].
    """
    seen, out = set(), [False] * len(ids)
    for t in range(1, len(ids)):
        pair = (ids[t - 1], ids[t])
        out[t] = pair in seen
        seen.add(pair)
    return out
