"""analysis/figures.py — the research harness's figures, drawn by tools/ from committed families (no run draws them):

    equal_footing.png  each claim at the per-method rates and at each shared rate (tools/reference.py --family equal)
    frontier.png       forgetting against gain along each method's learning-rate frontier (--family frontier)
    kl_law.png         forgetting against the forward KL on the new task, every run, GRPO's line (--family frontier)
    loop_steps.png, loop_stages.png  the CODING stage's loops, per step and per stage (tools/collapse.py)
    mediation.png      where the extra forgetting lands: each arm's MATH drop and KL_old against its SCIENCE gain,
                       and GRPO's law of the drop on KL_old (tools/mediation.py --summary)

They use infra/plots.py's helpers: the same look, the same atomic writes, None without matplotlib.
"""
import math
import os

from analysis import mediation
from analysis.frontier import law_points, line_fit, rate_label
from infra.plots import COLORS, CONFIG_COLORS, color_of, label_of, pyplot, save
from infra.stats import mean_interval

# The loop, step by step: three of what tools/collapse.py logs on every CODING step of a cell, titled by what they
# ask (the teacher's push and the entropies stay in each cell's result.json and docs/RESULTS.md's tables)
LOOP_METRICS = [("loop_share_failed", "Does the student loop?\nloop tokens' share of its failed answers"),
                ("distilled_token_frac", "Does the teacher still teach?\nshare of the batch's tokens distilled"),
                ("reward", "Training reward\n(mean over the batch's answers)")]


def plot_loop_steps(cells, path, labels=None, window=5, tests=None):
    """The CODING stage step by step: one panel per LOOP_METRICS key, one line per cell: each seed's running mean
    over `window` steps (a step without a value left out), then the mean over the seeds with its 95% band (drawn only
    where every seed has a value: a band from two seeds of three would be twelve standard errors wide). The fourth
    panel: each cell's CODING test accuracy before and after the stage (mean over seeds, 95% interval).

    cells: {cell name: [one seed's log rows, ...]}, the rows as tools/collapse.py writes them;
    tests: {cell name: [(accuracy before, after) per seed]} (fractions)."""
    plt = pyplot()
    if plt is None:
        return None
    fig, grid = plt.subplots(2, 2, figsize=(10.5, 7.4), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for c, (cell, seeds) in enumerate(cells.items()):
        steps = sorted({r["step"] for rows in seeds for r in rows})
        color = COLORS[c % len(COLORS)]
        for ax, (key, _) in zip(axes, LOOP_METRICS):
            pts = []
            for s in steps:   # each seed's running mean over the window, then the mean over the seeds
                per_seed = []
                for rows in seeds:
                    near = [r.get(key) for r in rows if abs(r["step"] - s) <= window // 2]
                    near = [v for v in near if v is not None]
                    if near:
                        per_seed.append(sum(near) / len(near))
                if per_seed:
                    pts.append((s, *mean_interval(per_seed), len(per_seed)))
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.4, color=color, label=label_of(labels, cell))
            band = [p for p in pts if p[4] == len(seeds) > 1]   # (the band only where every seed has a value)
            if band:
                ax.fill_between([p[0] for p in band], [p[2] for p in band], [p[3] for p in band], color=color, alpha=0.12)
        if (tests or {}).get(cell):   # the test accuracy before and after the stage, the cell's two points joined
            ends = [mean_interval([100 * v[j] for v in tests[cell]]) for j in (0, 1)]
            x = [0 + 0.07 * (c - 2), 1 + 0.07 * (c - 2)]
            axes[3].plot(x, [m for m, _, _ in ends], "o-", color=color, ms=4, lw=1.2)
            for xi, (m, lo, hi) in zip(x, ends):
                if lo is not None:
                    axes[3].plot([xi, xi], [lo, hi], color=color, lw=1.2)
    for ax, (key, title) in zip(axes, LOOP_METRICS):
        ax.set_title(title, fontsize=9.5)
        ax.set_xlabel("CODING step", fontsize=8.5)
        ax.set_ylim(0, 1)
    axes[3].set_title("CODING test accuracy\n(Acc@k, %, before and after the stage)", fontsize=9.5)
    axes[3].set_xticks([0, 1], ["before (after TOOLUSE)", "after CODING"], fontsize=8.5)
    axes[3].set_xlim(-0.4, 1.4)
    axes[3].set_ylim(0, 100)
    handles, names = axes[0].get_legend_handles_labels()
    n_seeds = max(len(s) for s in cells.values())
    fig.legend(handles, names, loc="upper center", ncol=3, fontsize=8.5, frameon=False,
               title=f"each line: running mean over {window} steps, mean over {n_seeds} seeds, 95% band", title_fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return save(fig, path, layout=False)


def plot_loop_stages(probes, path, stages=None, labels=None):
    """The loop's growth along the stages: the probe's loop-token share of failed responses at the base and after
    stages 1–3, one line per configuration, the mean over the seeds with its 95% whiskers.

    probes: [one seed's probe dict ({"base": {...}, "grpo/stage1": {...}, ...}), ...]."""
    plt = pyplot()
    if plt is None or not probes:
        return None
    configs = list(dict.fromkeys(k.split("/")[0] for k in probes[0] if "/" in k))
    names = ["base"] + [f"after {s}" for s in (stages or ["stage 1", "stage 2", "stage 3"])[:3]]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for c, config in enumerate(configs):
        keys = ["base"] + [f"{config}/stage{k}" for k in (1, 2, 3)]
        cols = [mean_interval([100 * p[k]["loop_share_failed"] for p in probes]) for k in keys]
        x = [i + 0.06 * (c - 1) for i in range(len(keys))]   # (side by side at each point)
        ax.plot(x, [m for m, _, _ in cols], marker="o", color=color_of(labels, config, c), label=label_of(labels, config))
        if len(probes) > 1:
            ax.errorbar(x, [m for m, _, _ in cols], yerr=[[m - lo for m, lo, _ in cols], [hi - m for m, _, hi in cols]],
                        ls="none", color=color_of(labels, config, c), capsize=3)
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
    plt = pyplot()
    if plt is None or not claims:
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


FRONTIER_COLORS = {role: CONFIG_COLORS[role] for role in ("GRPO", "SDPO_0", "SDPO_5%")}   # (infra/plots.py's)


def label_panel(ax, title, xlabel, ylabel):
    """A frontier or law panel's title, axis labels, small ticks and a light grid."""
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def plot_frontier(cells, path):
    """Forgetting against new-task gain, one panel per stage: each method's learning rates as points (mean over
    seeds, 95% t-intervals both ways), joined in the order of the rate and labelled with it; stage 1 has no earlier
    domain, so its panel shows the OOD drop. cells: {(role, lr): {seed: analysis.frontier.run_points}}."""
    plt = pyplot()
    if plt is None or not cells:
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
                ax.annotate(rate_label(lr), (g, y), textcoords="offset points", xytext=(4, 3),
                            fontsize=6, color=color)
                pts.append((g, y))
            if pts:
                ax.plot(*zip(*pts), color=color, lw=1.2, label=role)
        label_panel(ax, f"stage {k}" + (": OOD drop" if k == 1 else ": earlier domains, from the peak"),
                    f"gain on stage {k}'s own domain (points)",
                    "forgetting (points)" if k > 1 else "OOD drop from the base (points)")
    handles, names = axes[0].get_legend_handles_labels()   # (below the panels, off the data)
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    fig.suptitle("Forgetting against new-task gain along each method's learning rates (labels: the rate; lower right "
                 "is better); compare methods at the same gain, not the same rate", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    return save(fig, path, layout=False)


def plot_kl_law(cells, path, measure="peak", stages=(2, 3, 4)):
    """The KL-forgetting law, one panel per stage: every run that measured it as a point (forward KL to θ_0 on the
    stage's own prompts, x; forgetting of the earlier domains from their peak, y), coloured by method, with the line
    fitted to GRPO's runs (solid) and to every run (dashed, its R² in the title). SDPO above GRPO's line forgets more
    than its KL accounts for. The KL axis is linear below 1 nat and logarithmic above.
    cells: {(role, lr): {seed: analysis.frontier.run_points}} (frontier.law_cells)."""
    plt = pyplot()
    if plt is None or not cells:
        return None
    fig, axes = plt.subplots(1, len(stages), figsize=(4.2 * len(stages), 3.8))
    for k, ax in zip(stages, axes):
        every = law_points(cells, measure, k)
        for role, color in FRONTIER_COLORS.items():
            mine = [(x, y) for r, x, y in every if r == role]
            if mine:
                ax.scatter(*zip(*mine), s=10, color=color, alpha=0.6, label=role)
        lines = [(every, "--", "#555555", "every run"),
                 ([p for p in every if p[0] == "GRPO"], "-", FRONTIER_COLORS["GRPO"], "GRPO's line")]
        title = f"stage {k}"
        for points, style, color, label in lines:
            if len(points) < 3:
                continue
            a, b, r2 = line_fit([x for _, x, _ in points], [y for _, _, y in points])
            lo, hi = min(x for _, x, _ in points), max(x for _, x, _ in points)
            xs = [lo + (hi - lo) * i / 50 for i in range(51)]   # (a line drawn through points: the axis is symlog)
            ax.plot(xs, [a + b * x for x in xs], style, color=color, lw=1.2, label=label)
            if label == "every run" and r2 is not None:
                title += f": R² {r2:.2f} over {len(points)} runs"
        ax.set_xscale("symlog", linthresh=1.0)   # (linear below 1 nat, logarithmic above: SDPO's runs reach 100)
        label_panel(ax, title, f"forward KL(π_0 ‖ π) on stage {k}'s prompts (nats, symlog)",
                    "forgetting from the peak, earlier domains (points)")
    handles, names = axes[0].get_legend_handles_labels()   # (below the panels, off the data)
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    fig.suptitle("The KL-forgetting law (RL's Razor; the paper's Appendix B): does SDPO forget more than its forward "
                 "KL accounts for? (if so, its points lie above GRPO's line)", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.92))
    return save(fig, path, layout=False)


MEDIATION_COLORS = {**FRONTIER_COLORS, "SDPO_0 failed-only": "#2ca02c"}   # (V1: SDPO_0 distilling failures only)


def plot_mediation(fam, path):
    """The mediation experiment in three panels (docs/studies/mediation.md). Left and middle: each arm's rates as
    points (mean over seeds, 95% t-intervals over seeds with the prompts held fixed; the declared tests' intervals,
    which resample the prompts too, are the report's), joined in the order of the rate: the MATH drop on the 288
    fresh prompts (M1) and KL_old, the movement on MATH's inputs (M2), against the SCIENCE gain. Right: every run's
    drop against its KL_old, with GRPO's law drop = a + b · log(1 + KL_old) fitted over GRPO's runs (M4: a run above
    it forgets more than its movement on the old inputs accounts for). fam: analysis.mediation.read_runs."""
    plt = pyplot()
    if plt is None or not fam["runs"]:
        return None
    s = mediation.stacked(fam)
    values, cells = mediation.measures(s, mediation.identity_prompts(s)), mediation.cells_of(fam["runs"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    panels = [("drop", "Does SDPO_0 forget more at matched gain? (M1)", "MATH drop from θ_1, 288 fresh prompts (points)"),
              ("kl_old", "Does it move MATH's inputs more? (M2)", "KL_old = E_MATH[KL(π_1 ‖ π_θ)] (nats)")]
    for ax, (measure, title, ylabel) in zip(axes, panels):
        for role, color in MEDIATION_COLORS.items():
            pts = []
            for (r, lr), rows in sorted((c for c in cells.items() if c[0][0] == role), key=lambda c: c[0][1]):
                if len(rows) < 2:
                    continue
                g, glo, ghi = mean_interval([float(values["gain"][i]) for i in rows])
                y, ylo, yhi = mean_interval([float(values[measure][i]) for i in rows])
                ax.errorbar([g], [y], xerr=[[g - glo], [ghi - g]], yerr=[[y - ylo], [yhi - y]], color=color,
                            fmt="o", ms=4, lw=1, capsize=2)
                ax.annotate(rate_label(lr), (g, y), textcoords="offset points", xytext=(4, 3), fontsize=6,
                            color=color)
                pts.append((g, y))
            if pts:
                ax.plot(*zip(*pts), color=color, lw=1.2, label=role)
        label_panel(ax, title, "SCIENCE gain from θ_1, 160 prompts (points)", ylabel)
    ax = axes[2]
    for role, color in MEDIATION_COLORS.items():
        rows = [i for (r, _), idx in cells.items() if r == role for i in idx]
        if rows:
            ax.scatter(values["kl_old"][rows], values["drop"][rows], s=10, color=color, alpha=0.6)
    grpo = [i for (r, _), idx in cells.items() if r == "GRPO" for i in idx]
    if len(grpo) >= 3:
        a, b = mediation.law_fit(values, grpo)
        hi = float(max(values["kl_old"]))
        xs = [hi * i / 50 for i in range(51)]
        ax.plot(xs, [a + b * math.log1p(x) for x in xs], "-", color=MEDIATION_COLORS["GRPO"], lw=1.2,
                label="GRPO's law: a + b·log(1 + KL_old)")
        ax.legend(fontsize=7, frameon=False, loc="upper left")
    wide = float(max(values["kl_old"])) > 10   # (a collapse reaches tens of nats: then linear below 1, log above)
    if wide:
        ax.set_xscale("symlog", linthresh=1.0)
    label_panel(ax, "Does GRPO's law of the drop on KL_old account for SDPO_0's? (M4)",
                "KL_old (nats" + (", symlog)" if wide else ")"), "MATH drop from θ_1, fresh prompts (points)")
    handles, names = axes[0].get_legend_handles_labels()   # (below the panels, off the data)
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    fig.suptitle(f"Where the extra forgetting lands: SCIENCE from one shared MATH checkpoint θ_1 per seed "
                 f"({len(fam['theta1'])} seeds; labels: the rate)", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.93))
    return save(fig, path, layout=False)
