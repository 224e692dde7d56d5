"""classroom/tokens.py: the per-token view is computed from the same functions that train (S1–S3, G1), is
self-contained HTML, and renders in a real browser."""
import json
import shutil
import subprocess
import tempfile

import matplotlib.image
import pytest

import sdpo
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
