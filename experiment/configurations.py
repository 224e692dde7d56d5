"""experiment/configurations.py — what --method names: each configuration of a command, its settings, its run name
and the method train.run_steps is handed.

    parse_command(argv, continual) -> (parser, args, stages, benchmarks, configs, defaults)
                 continual.py's flags (infra/flags.py) and its configurations, [(method, settings, run name)], in order

A configuration is a method (METHODS) with the settings of every knob that names one: the method's own
SETTINGS (grpo.py, sdpo.py; SDPO's teacher at the stage boundary, T3, among them), for SDPO beyond/variants.py's, and
the method's learning rate. The method is handed its own knobs as one instance of its config class (CONFIGS:
grpo.GRPOConfig, sdpo.SDPOConfig, variants.BeyondConfig), the command's values with the configuration's over them.
Its run name carries every setting away from its default, so two configurations never share a name. The run
directories (experiment/rundir.py) take the list as it is and know nothing of the methods."""
import dataclasses

import grpo
import sdpo
from beyond import variants
from experiment.metrics import PAPER
from infra import flags

T3_SETTINGS = ("teacher_init", "teacher_mix")   # SDPO's teacher at the stage boundary (T3), last in its settings
# Every method train.run_steps can be handed, by name: the paper's two, each a module with train.py's five functions,
# and beyond/variants.py's, SDPO with another teacher kind or a forgetting defence, built over the sequence's θ_0:
# METHODS["sdpo_beyond"](θ_0). --method names the first two (a new method adds its row here); the third is taken
# when one of its knobs is set, and configurations() says so in one line.
METHODS = {"grpo": grpo, "sdpo": sdpo, "sdpo_beyond": variants.method}
# Each method's knobs, the class of the `cfg` it is handed (a new method adds its row here too)
CONFIGS = {"grpo": grpo.GRPOConfig, "sdpo": sdpo.SDPOConfig, "sdpo_beyond": variants.BeyondConfig}
# The paper's SDPO configurations by their --method name (sdpo_0, sdpo_5, …): the settings experiment/metrics.PAPER
# gives each, over the command's SDPO flags (α = 0 where a row leaves it inert)
PRESETS = {name: settings for name, method, settings in PAPER.values() if method == "sdpo"}


def knobs(continual):
    """The knob rows by who reads them (each method of METHODS, SDPO's with beyond/variants.py's; "every method":
    continual.py's own), and beyond/variants.py's function naming flags set to no effect."""
    rows = {name: flags.knob_rows(m) for name, m in METHODS.items() if hasattr(m, "SETTINGS")}
    rows["sdpo"] += flags.knob_rows(variants, "beyond")
    return {**rows, "every method": flags.knob_rows(continual)}, variants.warnings_of


def row_of(method, settings):
    """The row of METHODS and CONFIGS a configuration takes: its method's, or the third, beyond/variants.py's, for
    SDPO when one of that file's knobs is set."""
    return "sdpo_beyond" if method == "sdpo" and variants.wanted(settings) else method


def naming_knobs():
    """The knobs whose values name a configuration (and so its run name), not the run directory's hash."""
    return {*variants.SETTINGS, "trust_rate", *T3_SETTINGS,
            *(k for m in METHODS.values() for k in getattr(m, "SETTINGS", ()))}


def configuration(method, args, preset):
    """(method, settings, run name) of one configuration: the method's SETTINGS (SDPO: beyond/variants.py's and
    T3's too), the preset over them, and the method's rate; the name carries every setting away from its default."""
    settings = {k: getattr(args, k) for k in METHODS[method].SETTINGS}
    if method == "sdpo":   # beyond/variants.py's knobs and T3's name an SDPO configuration too
        settings.update({**variants.settings_of(args), **{k: getattr(args, k) for k in T3_SETTINGS}})
    settings.update(preset)
    name = (variants if row_of(method, settings) == "sdpo_beyond" else METHODS[method]).run_name(settings)
    return method, {**settings, "lr": flags.method_lr(args, method)}, name


def configurations(ap, args):
    """[(method, settings, run name)] for every configuration of --method, in order; the same one twice is refused
    in one line (ap.error)."""
    configs = []
    for item in args.method:
        if item in PRESETS:   # a configuration of the paper's, by name (experiment/metrics.PAPER)
            configs.append(configuration("sdpo", args, {"alpha": 0.0, **PRESETS[item]}))
        else:                 # grpo, sdpo, or any other method of METHODS: one configuration per value of its sweeps
            configs += [configuration(item, args, one) for one in flags.swept(CONFIGS[item], args)]   # (SDPO's α, T1)
    names = [c[2] for c in configs]
    if len(set(names)) < len(names):
        ap.error(f"--method: the same configuration twice ({', '.join(names)})")
    # the third row of METHODS is taken by its knobs: said, once each
    for name in [name for method, settings, name in configs if row_of(method, settings) == "sdpo_beyond"]:
        print(f"{name}: SDPO beyond the paper, as its knobs ask: configurations.METHODS['sdpo_beyond'] (beyond/)")
    return configs


def parse_command(argv, continual):
    """continual.py's command line, checked before any work starts (infra/flags.continual_args over every file's
    knobs): (parser, args, stages, benchmarks, configs, defaults); configs: every configuration of --method."""
    rows, warnings = knobs(continual)   # grpo.py's, sdpo.py's, beyond/variants.py's, continual.py's
    ap, args, stages, benchmarks, defaults = flags.continual_args(argv, PRESETS, rows, warnings)
    return ap, args, stages, benchmarks, configurations(ap, args), defaults


def config_of(method, settings, args):
    """The `cfg` the method is handed: its config class (CONFIGS; SDPO's third row when one of beyond/variants.py's
    knobs is set) built from the command's values (args) with the configuration's settings over them."""
    table = CONFIGS[row_of(method, settings)]
    return table(**{f.name: settings.get(f.name, getattr(args, f.name)) for f in dataclasses.fields(table)})


def method_of(method, settings, base):
    """The method train.run_steps is handed: METHODS[method], or its third row, beyond/variants.py's, when one of that
    file's knobs is set (built over the sequence's θ_0, `base`; configurations() said so)."""
    return METHODS["sdpo_beyond"](base) if row_of(method, settings) == "sdpo_beyond" else METHODS[method]
