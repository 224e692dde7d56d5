"""beyond — what other implementations do that the paper does not: the other teacher kinds (T4 live, T5 θ_0, T6
trust region) and the forgetting defences (R1 replay, R2 L2 anchor, R3 KL to θ_0), as one method built on sdpo.py
with the same four functions and its own knobs. continual.py and sdpo.py hand it to train.run_steps when one of its
knobs is set; the paper's files never import it."""
