"""infra/padding.py — lists of token ids to padded tensors: prompts on the left, responses on the right,
each length rounded up to a multiple of 16 (a CPU kernel is slow on every *new* shape). rollout.pack puts
the two side by side (the layout in rollout.py's docstring)."""
import torch

PAD_MULTIPLE = 16


def round_up(n, m=PAD_MULTIPLE):
    """n rounded up to a multiple of m (at least m)."""
    return max(m, -(-n // m) * m)


def left_pad(seqs, pad_id, device):
    """List of id lists -> (ids [B, P], attention mask [B, P]) padded on the left."""
    P = round_up(max(len(s) for s in seqs))
    ids = torch.full((len(seqs), P), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), P), dtype=torch.long)
    for b, s in enumerate(seqs):
        if s:
            ids[b, P - len(s):] = torch.tensor(s)
            mask[b, P - len(s):] = 1
    return ids.to(device), mask.to(device)


def right_pad(seqs, pad_id, device):
    """List of id lists -> (ids [B, T], mask [B, T]) padded on the right (responses)."""
    T = round_up(max(len(s) for s in seqs))
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, :len(s)] = 1
    return ids.to(device), mask.to(device)
