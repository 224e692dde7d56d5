"""LAB.md never rots: every exercise's command runs (lab.py, with its --fast settings appended: argparse keeps
the last value of a flag) and exits 0. An exercise added to the sheet without --fast settings fails."""
import os
import subprocess
import sys
import types

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import lab  # noqa: E402


def test_every_exercise_has_fast_settings():
    numbers = [n for n, _, _ in lab.exercises()]
    assert len(numbers) >= 8 and numbers == sorted(numbers)
    assert set(numbers) == set(lab.FAST)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("lab")


@pytest.mark.parametrize("number,title,command", lab.exercises())
def test_exercise_command_runs(number, title, command, workdir):
    seconds, status = lab.run_exercise(number, command, str(workdir), fast=True)
    log = (workdir / "logs" / f"{number}.txt").read_text()
    assert status == 0, f"exercise {number}: {command}\n{log[-3000:]}"


def test_lab_py_runs_an_exercise_and_writes_the_class_folder(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "lab.py"), "9", "--out", str(tmp_path / "class")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for f in ("LAB.md", "timings.md", "logs/9.txt"):
        assert (tmp_path / "class" / f).is_file()
    assert "| 9. The metrics by hand" in (tmp_path / "class" / "timings.md").read_text()
    assert not (tmp_path / "class" / "SOLUTIONS.md").exists()   # the answers stay with the teacher


@pytest.mark.parametrize("argv,message", [([], "give --all or exercise numbers"), (["99"], "no exercise 99"),
                                          (["--all", "3"], "not both")])
def test_lab_py_bad_input_is_one_line(argv, message):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "lab.py"), *argv], capture_output=True, text=True)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


# ----------------------------------------------------------------------------------------------
# Exercise 11, "change one line": each line is where LAB.md says, and the change gives SOLUTIONS.md's answer
# ----------------------------------------------------------------------------------------------
def changed(module, old, new):
    """The module with one line changed, loaded from its edited source (the file itself is untouched)."""
    path = os.path.join(ROOT, f"{module}.py")
    source = open(path).read()
    assert source.count(old) == 1, f"LAB.md exercise 11: '{old}' is no longer in {module}.py exactly once"
    m = types.ModuleType(f"{module}_changed")
    m.__file__ = path
    exec(compile(source.replace(old, new), path, "exec"), m.__dict__)
    return m


def pair():
    g = torch.Generator().manual_seed(0)
    return [torch.log_softmax(torch.randn(1, 50, generator=g), -1) for _ in range(2)]


def test_change_one_line_a_std_in_g1():
    g = changed("grpo", "def group_advantages(rewards, group_size, scale_std=False):",
                "def group_advantages(rewards, group_size, scale_std=True):")
    adv = g.group_advantages(torch.tensor([1., 0, 0, 0, 1, 1, 0, 0]), 4)
    assert adv.tolist() == pytest.approx([1.4997, -0.4999, -0.4999, -0.4999, 0.8659, 0.8659, -0.8659, -0.8659],
                                         abs=1e-4)


def test_change_one_line_b_no_tail_bucket_in_s4():
    import sdpo
    S, T = pair()
    s, t = sdpo.topk_logprobs(S, T, 5)
    assert (s.exp().sum().item(), t.exp().sum().item()) == pytest.approx((1.0, 1.0), abs=1e-6)
    assert sdpo.generalized_jsd(s, t).item() == pytest.approx(0.1026, abs=1e-4)
    cut = changed("sdpo", "return torch.cat([s_k, s_tail], -1), torch.cat([t_k, t_tail], -1)", "return s_k, t_k")
    s, t = cut.topk_logprobs(S, T, 5)
    assert (s.exp().sum().item(), t.exp().sum().item()) == pytest.approx((0.497, 0.119), abs=1e-3)
    assert cut.generalized_jsd(s, t).item() == pytest.approx(0.0765, abs=1e-4)


def test_change_one_line_c_beta_zero_in_s3():
    import sdpo
    f = changed("flags", 'g.add_argument("--beta", type=float, default=0.5,', 'g.add_argument("--beta", type=float, default=0.0,')
    beta = f.parser("sdpo", "", "").parse_args([]).beta
    S, T = pair()
    assert beta == 0.0
    assert sdpo.generalized_jsd(S, T, beta).item() == pytest.approx(1.3540, abs=1e-4)
    assert sdpo.generalized_jsd(S, T, beta).item() == sdpo.kl_from_logp(T, S).item()   # exactly the forward KL
    js = sdpo.generalized_jsd(S, T, 0.5).item()
    assert js == pytest.approx(0.2350, abs=1e-4) and js < 0.6932   # JS ≤ log 2
