"""classroom/tokens.py: the per-token view is computed from the same functions that train (S1–S3, G1), is
self-contained HTML, and renders in a real browser."""
import json
import math
import shutil
import subprocess
import tempfile

import matplotlib.image
import pytest

from analysis import probes
import sdpo
from world import tasks
from classroom import tokens


def test_token_signals_match_the_training_functions(tiny):
    model, tok = tiny
    records = [{"prompt": "What is 2+3? Answer in \\boxed{}.", "kind": "math", "answer": "5"}]
    rows = tokens.token_signals(model, sdpo.stage_teacher(model), tok, records, group_size=8, seed=1)
    assert len(rows) == 8
    for r in rows:
        if r["has_signal"]:
            t = r["tokens"][0]
            assert t["gjsd"] >= 0 and 0 < t["p_student"] <= 1 and 0 < t["p_teacher"] <= 1
            assert len(t["teacher_top"]) == 3
        else:
            assert all(t["gjsd"] is None for t in r["tokens"])
    # GRPO's one number per response sums to 0 over the group (G1)
    assert abs(sum(r["advantage"] for r in rows)) < 1e-5


def test_cli_writes_a_self_contained_page_a_picture_and_the_numbers(tmp_path):
    out = tmp_path / "view"
    chosen = tokens.main(["--prompts", "2", "--group-size", "4", "--show", "3", "--max-new-tokens", "24",
                          "--out", str(out)])
    assert len(chosen) == 3                       # 8 responses sampled, 3 shown
    page = (out / "tokens.html").read_text()
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")   # nothing fetched
    assert page.count("class='tok'") >= 3
    assert (out / "tokens.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "tokens.json").read_text())[0]["tokens"]


def test_the_page_renders_in_headless_chromium(tmp_path):
    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (Debian package 'chromium')")
    tokens.main(["--prompts", "2", "--group-size", "4", "--show", "2", "--max-new-tokens", "24",
                 "--out", str(tmp_path)])
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tempfile.mkdtemp()}", "--window-size=1000,700", f"--screenshot={shot}",
                    f"file://{tmp_path / 'tokens.html'}"], capture_output=True, timeout=120)
    assert shot.is_file() and shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 5000
    # the browser laid the page out: dark text, and the S3 colouring (white to red) on some tokens
    rgb = matplotlib.image.imread(shot)[..., :3]                     # [H, W, 3] in [0, 1]
    assert (rgb.mean(-1) < 0.3).mean() > 0.001                       # text was drawn
    assert ((rgb[..., 0] - rgb[..., 1]) > 0.3).mean() > 0.0001       # red-shaded tokens were drawn


def test_loop_tokens_are_marked_and_coloured_by_the_teachers_push(tiny, tmp_path):
    model, tok = tiny
    records = tasks.train_records("coding", seed=0)[:2]   # 'lambda x: x…': the second ' x' is a loop
    teacher = sdpo.stage_teacher(model)
    rows = tokens.token_signals(model, teacher, tok, records, group_size=8, seed=1)
    assert any(t["repeat"] for r in rows for t in r["tokens"])
    for r in rows:   # the underline is tokens.periodic_loop_tokens of the response (one text per token id here),
        # the loop probe's mark probes.loop_tokens; the push is log p_T − log p_S of the sampled token
        texts = [t["text"] for t in r["tokens"]]
        assert [t["loop"] for t in r["tokens"]] == tokens.periodic_loop_tokens(texts)
        assert [t["repeat"] for t in r["tokens"]] == probes.loop_tokens(texts)
        for t in r["tokens"]:
            if t["push"] is not None:
                assert t["push"] == pytest.approx(math.log(t["p_teacher"]) - math.log(t["p_student"]), abs=1e-4)
    # a hand-written row: 'ab' then 'ab' again: the second 'b' is a loop token (its bigram (a, b) occurred)
    toks = [{"text": c, "gjsd": 0.1, "p_student": 0.5, "p_teacher": p, "push": math.log(p / 0.5), "loop": loop,
             "repeat": loop, "teacher_top": []} for c, p, loop in [("a", 0.5, False), ("b", 0.5, False), ("a", 0.5, False),
                                                   ("b", 0.9, True), ("c", 0.1, False)]]
    row = {"prompt": "p", "reward": 0.0, "advantage": -1.0, "has_signal": True, "response": "ababc", "tokens": toks}
    page = tmp_path / "t.html"
    tokens.write_html([row], str(page), "test")
    text = page.read_text()
    assert text.count("border-bottom") == 1 and tokens.push_color(math.log(0.9 / 0.5)) in text   # blue: raised
    assert "loop token |" in text
    assert tokens.push_color(0.3).startswith("rgba(31,119,180") and tokens.push_color(-0.3).startswith("rgba(255,127")
    assert tokens.push_color(None).startswith("rgba(120")
    line = tokens.loop_line([row])
    assert "(underlined): 1 of 5 sampled" in line and f"{math.log(0.9 / 0.5):+.3f} (1 tokens)" in line


@pytest.mark.parametrize("text,loops", [
    ("lambdambdambda", "FFFFFTTTTTTTTT"),          # 3¼ copies of 'ambd', 13 tokens: a loop after the first copy
    ("lambdambda", "FFFFFFFFFF"),                  # 2¼ copies: not yet
    ("1600 so \\boxed{1600}", "F" * 20),         # a number said twice is no loop (loop_tokens marks '600')
    ("1000", "FFFF"), ("x = 100000", "F" * 10),    # a few zeros: a stretch under 8 tokens
    ("aaaaaaaaa", "FTTTTTTTT"),                   # one token 9 times
    ("abababab", "FFTTTTTT"), ("ababab", "FFFFFF"),   # 4 copies (8 tokens) yes, 3 (6 tokens) no
    ("\\boxed{7}\\boxed{7}\\boxed{7}", "F" * 9 + "T" * 18),
    ("", ""), ("a", "F"),
])
def test_periodic_loop_tokens_mark_loops_not_repeated_numbers(text, loops):
    """The per-token view's underline (classroom/tokens.py): three or more back-to-back copies of one pattern of
    at most 12 tokens, the stretch at least 8 tokens; against a brute force that tries every stretch."""
    assert tokens.periodic_loop_tokens(list(text)) == [c == "T" for c in loops]
    assert tokens.periodic_loop_tokens(list(text)) == periodic_by_brute_force(list(text))


def periodic_by_brute_force(ids, min_copies=3, max_period=12, min_span=8):
    """Every stretch i..j and period p: if it is p-periodic, at least min_copies·p and min_span long, its tokens
    after the first p are marked."""
    out = [False] * len(ids)
    for p in range(1, max_period + 1):
        for i in range(len(ids)):
            for j in range(i + max(min_copies * p, min_span), len(ids) + 1):
                if all(ids[t] == ids[t - p] for t in range(i + p, j)):
                    out[i + p:j] = [True] * (j - i - p)
    return out


def test_periodic_loop_tokens_agree_with_brute_force_on_random_strings():
    import random
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.choice("ab" if rng.random() < 0.5 else "abc") for _ in range(rng.randrange(0, 30))]
        assert tokens.periodic_loop_tokens(ids) == periodic_by_brute_force(ids), "".join(ids)
