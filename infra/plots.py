"""infra/plots.py — the figures every run writes: people would rather look than read.

    accuracy.png   accuracy per benchmark after every stage, one line per run       (C2)
    gain.png       gain G on each stage's own domain, forgetting F of the final model (A2, A3)
    drift.png      parameter and response drift after every stage                   (A4–A7)
    curves.png     reward, JS, student entropy and teacher entropy per step          (§3.1)
                   (▼ marks the steps after which a StableSDPO teacher was refreshed, T2)
    differences.png  with several seeds: each run minus the first, per step, and its 95% band

With several seeds the lines are the mean and the band (or whisker) is the same 95% t-interval over
the seeds as the tables give (stats.mean_interval). Legends use the paper's names of the
configurations where a run is one of them (`labels`, from metrics.role_of), else the run's name.
Every function takes plain dicts and lists (results.json and log.jsonl as read from disk) and returns
the file it wrote, or None when matplotlib is missing: a run never fails for want of a plot. Files are
written atomically. The research harness's figures (footing, frontier, the CODING loops) are analysis/figures.py's.
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


def save(fig, path, layout=True):
    if layout:
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


# One colour per configuration in every figure (the paper's names); any other run takes the palette by its position
CONFIG_COLORS = {"GRPO": "#1f77b4", "SDPO_0": "#ff7f0e", "SDPO_5%": "#d62728", "SDPO-CoT_0": "#9467bd",
                 "SDPO-CoT_5%": "#8c564b", "S-SDPO_0": "#e377c2", "StableSDPO": "#17becf",
                 "SDPO_0 failed-only": "#2ca02c"}


def color_of(labels, name, c):
    """A run's colour: its configuration's (CONFIG_COLORS, by its paper name) or the c-th of the palette."""
    return CONFIG_COLORS.get(label_of(labels, name), COLORS[c % len(COLORS)])


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
            line_with_band(ax, x, ys, color_of(labels, name, c), label_of(labels, name))
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
    handles, names = axes[0][0].get_legend_handles_labels()   # one legend above the panels, off the data
    fig.legend(handles, names, loc="upper center", ncol=min(len(names), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight() * (1 + (len(names) - 1) // 4)))
    return save(fig, path, layout=False)


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
            ax.bar(xs, means, width, color=color_of(labels, name, c), label=label_of(labels, name),
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
            line_with_band(ax, x, [y for y in ys if None not in y], color_of(labels, name, c), label_of(labels, name))
        near_one = "IoU" in title or "cosine" in title   # values near 1: zoomed, and the axis says so
        if near_one:
            ax.set_title(f"{title}\naxis from {ax.get_ylim()[0]:.2f}, not 0", fontsize=9)
        else:
            ax.set_ylim(bottom=0)
            ax.set_title(title, fontsize=9)
        ax.set_xticks(x, [f"after {s}" for s in stage_names(stages)], fontsize=8, rotation=30)
    axes[0].legend(fontsize=7)
    return save(fig, path)


def curve_panels(rows):
    """The (key, title) of the panels curves.png draws: a panel no run has (GRPO: JS, teacher entropy) is left out,
    and so is the share distilled by feedback when it is 0 at every step (feedback off, the built-in world's
    setting: a panel empty by the settings). A reward 0 at every step is drawn: it says something."""
    return [(k, t) for k, t in CURVE_METRICS if any(r.get(k) is not None for r in rows)
            and not (k == "feedback_frac" and not any(r.get(k) for r in rows))]


def plot_curves(rows, path, stages=None, labels=None):
    """curves.png: per step, the mean reward, SDPO's per-token JS, the student's and the teacher's
    entropy (the paper's §3.1 curves), one line per run; dotted lines mark stage boundaries, each stage
    named above its part. A panel no run has (GRPO: JS, teacher entropy), or the feedback share when feedback is
    off (0 throughout), is left out.

    rows: log.jsonl rows (continual.py's carry 'run' and 'stage'; grpo.py/sdpo.py's have neither).
    """
    if pyplot() is None:
        return None
    rows = [r for r in rows if "step" in r and "reward" in r]
    if not rows:
        return None
    runs = list(dict.fromkeys(r.get("run", "run") for r in rows))
    metrics = curve_panels(rows)
    if not metrics:
        return None
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
                ax.plot(*zip(*pts), lw=1, color=color_of(labels, run, c), label=label_of(labels, run))
            if key == "update_rel" and any(y > 0 for _, y in pts):
                ax.set_yscale("symlog", linthresh=1e-5)   # (a step with rate 0 moves nothing: 0 stays on the axis)
                ax.symlog = True
            marks = [(xi, r[key]) for xi, r in zip(x, mine) if r.get("teacher_refresh") and r.get(key) is not None]
            if marks:   # T2: the steps after which the teacher was refreshed
                ax.plot(*zip(*marks), ls="none", marker="v", ms=6, mec="black", mew=0.6,
                        color=color_of(labels, run, c), label=f"{label_of(labels, run)}: teacher refresh (T2)")
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
            line_with_band(ax, x, [running_mean(d, window) for d in per_seed], color_of(labels, run, c), name)
            refresh = sorted({(r.get("stage", 1) - 1) * steps_per_stage + r["step"] for r in seed_rows[0]
                              if r.get("run") == run and r.get("teacher_refresh")})
            for k, xr in enumerate(refresh):
                ax.axvline(xr, color=color_of(labels, run, c), ls="--", lw=0.7,
                           label=f"{label_of(labels, run)}: teacher refresh (T2)" if k == 0 else None)
    for ax, (_, title) in zip(axes, metrics):
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(f"difference in {title}", fontsize=8, pad=12 if stages else 6)
        ax.set_xlabel(f"step ({window}-step running mean)", fontsize=7)
        mark_stages(ax, stages, steps_per_stage)
    axes[0].legend(fontsize=6)
    return save(fig, path)
