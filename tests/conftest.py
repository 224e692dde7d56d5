import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def tiny():
    """The committed tiny model and its tokenizer (fp32, CPU)."""
    from infra import setup_torch
    from rollout import load_model
    setup_torch("cpu")
    return load_model("tiny", "cpu")


@pytest.fixture
def fresh_tiny(tiny):
    """A private copy of the tiny model (tests that train must not touch the shared one)."""
    import copy
    model, tok = tiny
    return copy.deepcopy(model), tok


def random_logp(*shape, seed=0, sharp=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(sharp * torch.randn(*shape, generator=g, dtype=torch.float64), -1).float()
