"""infra/plots.py — the figures every run writes: people would rather look than read.

    accuracy.png   accuracy per benchmark after every stage, one line per run       (C2)
    gain.png       gain G on each stage's own domain, forgetting F of the final model (A2, A3)
    drift.png      parameter and response drift after every stage                   (A4–A7)
    curves.png     reward, JS, student entropy and teacher entropy per step          (§3.1)
                   (▼ marks the steps after which a StableSDPO teacher was refreshed, T2)
    differences.png  with several seeds: each run minus the first, per step, and its 95% band
    footing.png    the claims at the per-method rates and at each shared rate (tools/reference.py --family equal)

With several seeds the lines are the mean and the band (or whisker) is the same 95% t-interval over
the seeds as the tables give (stats.mean_interval). Legends use the paper's names of the
configurations where a run is one of them (`labels`, from metrics.role_of), else the run's name.
Every function takes plain dicts and lists (results.json and log.jsonl as read from disk) and returns
the file it wrote, or None when matplotlib is missing: a run never fails for want of a plot. Files are
written atomically.
"""
import os

from infra.stats import mean_interval


def pyplot():
    """matplotlib.pyplot, imported on first use (it takes half a second), or None when it is missing."""
    global plt
    if plt is None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot
            plt = matplotlib.pyplot
        except ImportError:   # runs still succeed without plots
            return None
    return plt


plt = None

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
CURVE_METRICS = [("reward", "mean reward"), ("js", "JS per distilled token (SDPO)"),
                 ("entropy", "student entropy (nats)"), ("teacher_entropy", "teacher entropy (nats)"),
                 # what the step distilled and how far it moved θ: a collapse shows here as it happens
                 ("demo_frac", "share distilled by a demonstration"), ("feedback_frac", "share distilled by feedback"),
                 ("update_rel", "update ‖Δθ‖/‖θ‖"), ("lr", "learning rate in force\n(a climb from 0: the stage's warmup)")]
PER_DISTILLED_TOKEN = ("js", "entropy", "teacher_entropy")   # undefined on a step without signal


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=90)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    return path


def line_with_band(ax, x, ys, color, label):
    """Mean of ys (a list of equal-length lists, one per seed) with its 95% t-interval band when there are
    several seeds (labelled in the legend)."""
    ys = [y for y in ys if y is not None]
    if not ys:
        return
    cols = [mean_interval(list(c)) for c in zip(*ys)]                    # (mean, low, high) per point
    ax.plot(x, [c[0] for c in cols], marker="o", ms=3, color=color, label=label)
    if len(ys) > 1:
        ax.fill_between(x, [c[1] for c in cols], [c[2] for c in cols], color=color, alpha=0.2,
                        label=f"{label}: 95% interval over {len(ys)} seeds")


def label_of(labels, name):
    return (labels or {}).get(name) or name


def stage_names(stages):
    return [os.path.basename(s) for s in stages]


def mark_stages(ax, stages, steps_per_stage):
    """Dotted lines at the stage boundaries of a per-step panel, each stage named above its part."""
    for k in range(1, len(stages or [])):
        ax.axvline(k * steps_per_stage + 0.5, color="grey", ls=":", lw=0.8)
    for k, name in enumerate(stage_names(stages or [])):
        ax.text((k + 0.5) * steps_per_stage, 1.0, name, transform=ax.get_xaxis_transform(), ha="center",
                va="bottom", fontsize=6, color="grey")


def plot_accuracy(results, path, seeds_results=None, labels=None):
    """accuracy.png: one panel per benchmark, accuracy (%) across stages, one line per run."""
    if pyplot() is None:
        return None
    all_results = seeds_results or [results]
    benches, stages = results["benchmarks"], results["stages"]
    cols = min(4, len(benches))   # (no blank panels beside a single benchmark)
    rows = -(-len(benches) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    x = list(range(len(stages) + 1))
    for i, b in enumerate(benches):
        ax = axes[i // cols][i % cols]
        for c, name in enumerate(results["runs"]):
            ys = [[100 * row[i] for row in r["runs"][name]["acc"]] for r in all_results if name in r["runs"]]
            line_with_band(ax, x, ys, COLORS[c % len(COLORS)], label_of(labels, name))
        if b in stages:   # the stage that trains this benchmark's domain, shaded
            k = stages.index(b) + 1
            ax.axvspan(k - 1, k, color="0.9", zorder=0, label="its training stage" if i == 0 else None)
        ax.set_title(os.path.basename(b) + (f" (trained in stage {stages.index(b) + 1})" if b in stages else " (OOD)"),
                     fontsize=10)
        ax.set_xticks(x, ["base"] + [f"after {s}" for s in stage_names(stages)], fontsize=8, rotation=30)
        ax.set_ylim(0, 100)
        if i % cols == 0:
            ax.set_ylabel("Acc@k (%)", fontsize=9)
    for j in range(len(benches), rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=7)
    return save(fig, path)


def plot_gain_forgetting(results, path, seeds_results=None, labels=None):
    """gain.png: per run, the signed relative change δ (A2) on each stage's domain right after the stage, and δ of
    the final model on the earlier domains and the OOD benchmarks (bars; with several seeds the whiskers are 95%
    intervals). A3's G and F are δ's positive and negative parts: a bar below 0 is a loss that G clamps to 0."""
    if pyplot() is None:
        return None
    all_results = seeds_results or [results]
    stages, benches = results["stages"], results["benchmarks"]
    ood = [b for b in benches if b not in stages]
    panels = [("δ on each stage's domain right after it (%; G = max(δ, 0))",
               [(s, lambda r, k=k, s=s: r["per_stage"][k][s]["rel"]) for k, s in enumerate(stages)]),
              ("δ of the final model (%; F = max(−δ, 0))",
               [(b, lambda r, b=b: r["per_stage"][-1][b]["rel"]) for b in stages[:-1] + ood])]
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.6))
    names = list(results["runs"])
    width = 0.8 / max(1, len(names))
    for ax, (title, items) in zip(axes, panels):
        for c, name in enumerate(names):
            vals = [[100 * (get(r["runs"][name]) or 0.0) for r in all_results if name in r["runs"]]
                    for _, get in items]
            xs = [i + c * width for i in range(len(items))]
            ci = [(m, m if lo is None else lo, m if hi is None else hi)     # (mean, low, high) per bar
                  for m, lo, hi in map(mean_interval, vals)]
            means = [m for m, _, _ in ci]
            err = [[max(0.0, m - lo) for m, lo, _ in ci], [max(0.0, hi - m) for m, _, hi in ci]]
            ax.bar(xs, means, width, color=COLORS[c % len(COLORS)], label=label_of(labels, name),
                   yerr=err if len(all_results) > 1 else None, capsize=2)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(items))],
                      [os.path.basename(k) for k, _ in items], fontsize=8, rotation=20)
        ax.set_title(title + (f"; whiskers: 95% interval over {len(all_results)} seeds"
                              if len(all_results) > 1 else ""), fontsize=9)
        ax.set_ylabel("δ vs the base (%)", fontsize=9)
    axes[0].legend(fontsize=8)
    return save(fig, path)


def plot_accuracy_matrix(results, path, labels=None):
    """accuracy_matrix.png: per run, the accuracy matrix as a heatmap, stages (rows: the base, then after each
    stage) × benchmarks (columns), each cell's Acc@k (%) written in it; the cell of a stage's own domain boxed."""
    if pyplot() is None:
        return None
    stages, benches, names = results["stages"], results["benchmarks"], list(results["runs"])
    fig, axes = plt.subplots(1, len(names), figsize=(0.75 * len(benches) * len(names) + 1.5, 0.5 * len(stages) + 2.2),
                             squeeze=False)
    for ax, name in zip(axes[0], names):
        m = [[100 * v for v in row] for row in results["runs"][name]["acc"]]           # [stages + 1, benchmarks]
        im = ax.imshow(m, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for k, row in enumerate(m):
            for i, v in enumerate(row):
                ax.text(i, k, f"{v:.0f}", ha="center", va="center", fontsize=7, color="white" if v < 55 else "black")
        for k, s in enumerate(stages, start=1):
            if s in benches:
                i = benches.index(s)
                ax.add_patch(plt.Rectangle((i - 0.5, k - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
        ax.set_xticks(range(len(benches)), [os.path.basename(b) for b in benches], fontsize=7, rotation=45, ha="right")
        ax.set_yticks(range(len(stages) + 1), ["base"] + [f"after {s}" for s in stage_names(stages)], fontsize=7)
        ax.set_title(label_of(labels, name), fontsize=9)
    fig.colorbar(im, ax=axes[0][-1], fraction=0.046, pad=0.03, label="Acc@k (%)")
    return save(fig, path)


def plot_drift(results, path, seeds_results=None, labels=None):
    """drift.png: after every stage, vs the base: NSS (A4), largest angle (A5), mask IoU (A6),
    response cosine (A7) and the Monte-Carlo KL to the base."""
    if pyplot() is None:
        return None
    all_results = seeds_results or [results]
    names = [n for n, r in results["runs"].items() if r.get("drift") and all(r["drift"])]
    if not names:
        return None
    metrics = [("NSS vs base (A4)", lambda d: d["params_vs_base"]["all"]["nss_mean"]),
               ("max principal angle ° (A5)", lambda d: d["params_vs_base"]["all"]["angle_max"]),
               ("principal-mask IoU (A6)", lambda d: d["params_vs_base"]["all"]["iou_mean"]),
               ("response cosine vs base (A7)", lambda d: d["responses_vs_base"]["mean"]),
               ("KL(π‖π0) nats", lambda d: d["kl_to_base_mean"])]
    stages = results["stages"]
    x = list(range(1, len(stages) + 1))
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.0 * len(metrics), 2.8))
    for ax, (title, get) in zip(axes, metrics):
        for c, name in enumerate(names):
            ys = [[get(d) for d in r["runs"][name]["drift"]] for r in all_results
                  if name in r["runs"] and all(r["runs"][name].get("drift") or [None])]
            line_with_band(ax, x, [y for y in ys if None not in y], COLORS[c % len(COLORS)], label_of(labels, name))
        near_one = "IoU" in title or "cosine" in title   # values near 1: zoomed, and the axis says so
        if near_one:
            ax.set_title(f"{title}\naxis from {ax.get_ylim()[0]:.2f}, not 0", fontsize=9)
        else:
            ax.set_ylim(bottom=0)
            ax.set_title(title, fontsize=9)
        ax.set_xticks(x, [f"after {s}" for s in stage_names(stages)], fontsize=8, rotation=30)
    axes[0].legend(fontsize=7)
    return save(fig, path)


def plot_curves(rows, path, stages=None, labels=None):
    """curves.png: per step, the mean reward, SDPO's per-token JS, the student's and the teacher's
    entropy (the paper's §3.1 curves), one line per run; dotted lines mark stage boundaries, each stage
    named above its part. A panel no run has (GRPO: JS, teacher entropy) is left out.

    rows: log.jsonl rows (continual.py's carry 'run' and 'stage'; grpo.py/sdpo.py's have neither).
    """
    if pyplot() is None:
        return None
    rows = [r for r in rows if "step" in r and "reward" in r]
    if not rows:
        return None
    runs = list(dict.fromkeys(r.get("run", "run") for r in rows))
    metrics = [(k, t) for k, t in CURVE_METRICS if any(r.get(k) is not None for r in rows)]
    cols = min(4, len(metrics))
    fig, grid = plt.subplots(-(-len(metrics) // cols), cols, figsize=(3.4 * cols, 2.8 * -(-len(metrics) // cols)),
                             squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    steps_per_stage = max(r["step"] for r in rows)
    for c, run in enumerate(runs):
        mine = [r for r in rows if r.get("run", "run") == run]
        x = [(r.get("stage", 1) - 1) * steps_per_stage + r["step"] for r in mine]
        for ax, (key, _) in zip(axes, metrics):
            pts = [(xi, r[key]) for xi, r in zip(x, mine) if r.get(key) is not None
                   and not (r.get("skipped") and key in PER_DISTILLED_TOKEN)]
            if pts:
                ax.plot(*zip(*pts), lw=1, color=COLORS[c % len(COLORS)], label=label_of(labels, run))
            if key == "update_rel" and any(y > 0 for _, y in pts):
                ax.set_yscale("symlog", linthresh=1e-5)   # (a step with rate 0 moves nothing: 0 stays on the axis)
                ax.symlog = True
            marks = [(xi, r[key]) for xi, r in zip(x, mine) if r.get("teacher_refresh") and r.get(key) is not None]
            if marks:   # T2: the steps after which the teacher was refreshed
                ax.plot(*zip(*marks), ls="none", marker="v", ms=6, mec="black", mew=0.6,
                        color=COLORS[c % len(COLORS)], label=f"{label_of(labels, run)}: teacher refresh (T2)")
    for ax, (_, title) in zip(axes, metrics):
        title += "\n(log scale above 1e-5, linear below)" if getattr(ax, "symlog", False) else ""
        ax.set_title(title, fontsize=9, pad=12 if stages else 6)   # (room for the stage names)
        ax.set_xlabel("step" + (" (stages in order)" if stages else ""), fontsize=7)
        mark_stages(ax, stages, steps_per_stage)
    axes[0].legend(fontsize=7)
    return save(fig, path)


def running_mean(ys, window):
    """The centred running mean of a list over `window` points (fewer at the ends)."""
    h = window // 2
    return [sum(ys[max(0, i - h):i + h + 1]) / len(ys[max(0, i - h):i + h + 1]) for i in range(len(ys))]


def paired_differences(seed_rows, run, base, key, steps_per_stage):
    """(x, [per seed: run's value − base's value at each step]) of one curve, or None when the seeds do not
    share the same steps (a run cut short). x counts steps across stages."""
    def series(rows, name):   # {(stage, step): value} of one run
        return {(r.get("stage", 1), r["step"]): r.get(key) for r in rows
                if r.get("run") == name and "step" in r and not r.get("skipped") and r.get(key) is not None}
    per_seed = []
    for rows in seed_rows:
        a, b = series(rows, run), series(rows, base)
        points = sorted(k for k in a if k in b)
        per_seed.append((points, [a[k] - b[k] for k in points]))
    points = per_seed[0][0]
    if not points or any(p != points for p, _ in per_seed):
        return None
    return [(stage - 1) * steps_per_stage + step for stage, step in points], [d for _, d in per_seed]


def plot_differences(seed_rows, path, stages=None, labels=None, window=5):
    """differences.png: for paired runs over seeds, each run minus the first run, per step, for every
    curve both have (reward, JS, entropies). Each seed's difference is taken on the same step (both runs
    of a seed saw the same prompts), smoothed by a `window`-step running mean; the line is the mean over
    the seeds and the band its 95% t-interval, as in the tables. A band that leaves 0 is a difference
    the seeds agree on; one that holds 0 is not. ▼ marks the refresh steps of a StableSDPO run (T2).

    seed_rows: one list of log.jsonl rows per seed (continual.py's, each with 'run', 'stage', 'step').
    """
    if pyplot() is None or len(seed_rows) < 2:
        return None
    rows0 = [r for r in seed_rows[0] if "step" in r and "reward" in r]
    runs = list(dict.fromkeys(r["run"] for r in rows0 if "run" in r))
    if len(runs) < 2:
        return None
    base, others = runs[0], runs[1:]

    metrics = [(k, t) for k, t in CURVE_METRICS
               if any(r.get(k) is not None for r in rows0 if r.get("run") == base)
               and any(r.get(k) is not None for r in rows0 if r.get("run") in others)]
    if not metrics:
        return None
    steps_per_stage = max(r["step"] for r in rows0)
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.4 * len(metrics), 2.9), squeeze=False)
    axes = axes[0]
    for c, run in enumerate(others, start=1):
        name = f"{label_of(labels, run)} − {label_of(labels, base)}"
        for ax, (key, _) in zip(axes, metrics):
            paired = paired_differences(seed_rows, run, base, key, steps_per_stage)
            if paired is None:
                continue
            x, per_seed = paired
            line_with_band(ax, x, [running_mean(d, window) for d in per_seed], COLORS[c % len(COLORS)], name)
            refresh = sorted({(r.get("stage", 1) - 1) * steps_per_stage + r["step"] for r in seed_rows[0]
                              if r.get("run") == run and r.get("teacher_refresh")})
            for k, xr in enumerate(refresh):
                ax.axvline(xr, color=COLORS[c % len(COLORS)], ls="--", lw=0.7,
                           label=f"{label_of(labels, run)}: teacher refresh (T2)" if k == 0 else None)
    for ax, (_, title) in zip(axes, metrics):
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(f"difference in {title}", fontsize=8, pad=12 if stages else 6)
        ax.set_xlabel(f"step ({window}-step running mean)", fontsize=7)
        mark_stages(ax, stages, steps_per_stage)
    axes[0].legend(fontsize=6)
    return save(fig, path)


# The loop, step by step: what tools/collapse.py logs on every CODING step of a cell
LOOP_METRICS = [("loop_share_failed", "loop tokens, share of failed responses' tokens"),
                ("logratio_loop", "log p_T − log p_S on loop tokens"),
                ("logratio_other", "log p_T − log p_S on the other tokens"),
                ("eos_push", "push on end-of-response: p_T(EOS) − p_S(EOS)"),
                ("entropy_gap", "H_T − H_S per distilled token (nats)"),
                ("distilled_token_frac", "distilled share of the batch's tokens"),
                ("reward", "mean reward")]


def loop_value(row, key):
    """One step's value of a LOOP_METRICS key (H_T − H_S from the two entropies; None where undefined)."""
    if key == "entropy_gap":
        if row.get("skipped") or row.get("teacher_entropy") is None or row.get("entropy") is None:
            return None
        return row["teacher_entropy"] - row["entropy"]
    return row.get(key)


def plot_loop_steps(cells, path, labels=None, window=5):
    """The CODING stage step by step: one panel per LOOP_METRICS key, one line per cell: each seed's running mean
    over `window` steps (a step without a value left out), then the mean over the seeds with its 95% band (drawn only
    where every seed has a value: a band from two seeds of three would be twelve standard errors wide).

    cells: {cell name: [one seed's log rows, ...]}, the rows as tools/collapse.py writes them."""
    if pyplot() is None:
        return None
    cols = 4
    fig, grid = plt.subplots(2, cols, figsize=(3.4 * cols, 5.8), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for c, (cell, seeds) in enumerate(cells.items()):
        steps = sorted({r["step"] for rows in seeds for r in rows})
        for ax, (key, _) in zip(axes, LOOP_METRICS):
            pts = []
            for s in steps:   # each seed's running mean over the window, then the mean over the seeds
                per_seed = []
                for rows in seeds:
                    near = [loop_value(r, key) for r in rows if abs(r["step"] - s) <= window // 2]
                    near = [v for v in near if v is not None]
                    if near:
                        per_seed.append(sum(near) / len(near))
                if per_seed:
                    pts.append((s, *mean_interval(per_seed), len(per_seed)))
            if not pts:
                continue
            color = COLORS[c % len(COLORS)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.2, color=color, label=label_of(labels, cell))
            band = [p for p in pts if p[4] == len(seeds) > 1]   # (the band only where every seed has a value)
            if band:
                ax.fill_between([p[0] for p in band], [p[2] for p in band], [p[3] for p in band], color=color, alpha=0.15)
    for ax, (key, title) in zip(axes, LOOP_METRICS):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("CODING step", fontsize=8)
        ax.axhline(0, color="grey", lw=0.6)
        if key in ("loop_share_failed", "distilled_token_frac", "reward"):
            ax.set_ylim(0, 1)
    axes[-1].axis("off")
    handles, names = axes[0].get_legend_handles_labels()
    axes[-1].legend(handles, names, fontsize=8, loc="center",
                    title=f"running mean over {window} steps,\nmean over {max(len(s) for s in cells.values())} seeds, 95% band")
    return save(fig, path)


def plot_loop_stages(probes, path, stages=None, labels=None):
    """The loop's growth along the stages: the probe's loop-token share of failed responses at the base and after
    stages 1–3, one line per configuration, the mean over the seeds with its 95% whiskers.

    probes: [one seed's probe dict ({"base": {...}, "grpo/stage1": {...}, ...}), ...]."""
    if pyplot() is None or not probes:
        return None
    configs = list(dict.fromkeys(k.split("/")[0] for k in probes[0] if "/" in k))
    names = ["base"] + [f"after {s}" for s in (stages or ["stage 1", "stage 2", "stage 3"])[:3]]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for c, config in enumerate(configs):
        keys = ["base"] + [f"{config}/stage{k}" for k in (1, 2, 3)]
        cols = [mean_interval([100 * p[k]["loop_share_failed"] for p in probes]) for k in keys]
        x = [i + 0.06 * (c - 1) for i in range(len(keys))]   # (side by side at each point)
        ax.plot(x, [m for m, _, _ in cols], marker="o", color=COLORS[c % len(COLORS)], label=label_of(labels, config))
        if len(probes) > 1:
            ax.errorbar(x, [m for m, _, _ in cols], yerr=[[m - lo for m, lo, _ in cols], [hi - m for m, _, hi in cols]],
                        ls="none", color=COLORS[c % len(COLORS)], capsize=3)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("loop tokens, % of failed responses' tokens", fontsize=8)
    seeds = f"{len(probes)} seed" + ("s, 95% whiskers" if len(probes) > 1 else "")
    ax.set_title(f"The loop probe: 64 CODING prompts × 8 at T = 1 ({seeds})", fontsize=9)
    ax.legend(fontsize=8)
    return save(fig, path)


FOOTING_LABELS = {"per-method": "own rates", "1e-4": "both 1e-4", "4e-4": "both 4e-4"}
VERDICT_COLORS = {"shown": "#2ca02c", "opposite": "#d62728", "not separable": "#7f7f7f", "not testable": "#c7c7c7"}


def plot_footing(claims, path, columns=("per-method", "1e-4", "4e-4")):
    """Each claim's paired difference at each rate, turned so that the paper's side is to the right: one panel per
    claim, one row per rate, the mean with its 95% interval, coloured by the Holm-corrected verdict (grey: not
    separable; pale: the world, or that footing, cannot test the claim: a row with "footing_ok" False).

    claims: [{"id", "unit", "sign" (+1/−1: the paper's side), "rows": {column: {effect, low, high, corrected,
    scale} or None}, "testable": bool}]."""
    if pyplot() is None or not claims:
        return None
    cols = 4
    rows_n = (len(claims) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.3 * cols, 1.8 * rows_n + 0.8), squeeze=False)
    for ax, c in zip(axes.flat, claims):
        for y, column in enumerate(columns):
            r = c["rows"].get(column)
            if r is None or r.get("effect") is None:
                ax.text(0, y, "—", ha="center", va="center", fontsize=8, color="#7f7f7f")
                continue
            turn = c["sign"] * r["scale"]   # the paper's side to the right, in the claim's printed unit
            m, lo, hi = (turn * v if v is not None else None for v in (r["effect"], r["low"], r["high"]))
            verdict = r["corrected"] if c["testable"] and r.get("footing_ok", True) else "not testable"
            color = VERDICT_COLORS.get(verdict, "#7f7f7f")
            if lo is not None:
                ax.plot(sorted((lo, hi)), [y, y], color=color, lw=2.5)
            ax.plot([m], [y], "o", color=color, ms=5)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(range(len(columns)), [FOOTING_LABELS.get(c, c) for c in columns], fontsize=7)
        ax.set_ylim(len(columns) - 0.5, -0.5)
        ax.tick_params(axis="x", labelsize=7)
        ax.locator_params(axis="x", nbins=4)
        ax.set_title(f"{c['id']}: {c.get('title', '')}\n({c['unit']})" if c.get("title") else f"{c['id']} ({c['unit']})",
                     fontsize=7.5)
    for ax in list(axes.flat)[len(claims):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=col, lw=2.5, label=v) for v, col in VERDICT_COLORS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Each claim's paired difference over seeds (95% interval), the paper's side to the right, coloured by "
                 "Holm's verdict; pale: not testable\n(the world cannot test it, or at that footing a method does not "
                 "learn a stage the claim reads, or F sits at 0). Own rates match the step; a shared rate gives GRPO ~3× SDPO's.",
                 fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path + ".tmp.png", dpi=90)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    return path


FRONTIER_COLORS = {"GRPO": "#1f77b4", "SDPO_0": "#ff7f0e", "SDPO_5%": "#d62728"}


def plot_frontier(cells, path):
    """Forgetting against new-task gain, one panel per stage: each method's learning rates as points (mean over
    seeds, 95% t-intervals both ways), joined in the order of the rate and labelled with it; stage 1 has no earlier
    domain, so its panel shows the OOD drop. cells: {(role, lr): {seed: analysis.frontier.run_points}}."""
    if pyplot() is None or not cells:
        return None
    fig, axes = plt.subplots(1, 4, figsize=(15, 4.0))
    for k, ax in enumerate(axes, start=1):
        measure = "ood" if k == 1 else "peak"
        for role, color in FRONTIER_COLORS.items():
            pts = []
            for (r, lr) in sorted(c for c in cells if c[0] == role):
                per = [p for p in cells[(r, lr)].values() if p[measure][k - 1] is not None]
                if len(per) < 2:
                    continue
                g, glo, ghi = mean_interval([p["gain"][k - 1] for p in per])
                y, ylo, yhi = mean_interval([p[measure][k - 1] for p in per])
                ax.errorbar([g], [y], xerr=[[g - glo], [ghi - g]], yerr=[[y - ylo], [yhi - y]], color=color,
                            fmt="o", ms=4, lw=1, capsize=2)
                ax.annotate(f"{lr:.1e}".replace("e-0", "e-"), (g, y), textcoords="offset points", xytext=(4, 3),
                            fontsize=6, color=color)
                pts.append((g, y))
            if pts:
                ax.plot(*zip(*pts), color=color, lw=1.2, label=role)
        ax.set_title(f"stage {k}" + (": OOD drop" if k == 1 else ": earlier domains, from the peak"), fontsize=9)
        ax.set_xlabel(f"gain on stage {k}'s own domain (points)", fontsize=8)
        ax.set_ylabel("forgetting (points)" if k > 1 else "OOD drop from the base (points)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Forgetting against new-task gain along each method's learning rates (labels: the rate; lower right "
                 "is better); compare methods at the same gain, not the same rate", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path + ".tmp.png", dpi=90)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    return path
