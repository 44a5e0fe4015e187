"""The exposure sweep (``workflow/sweep.smk``): the tiny world at member exposures r, every method
scored, and AUROC against r per method.

At exposure r (:func:`exposure_config`), each model of ``pretrain`` sees its dataset's members r
times in its pretraining mix (``members.repeats``; same steps at every r), and each model of ``sft``
sees its dataset's members r times in fine-tuning with a fixed amount of filler
(``filler_per_member`` filler examples per member, so ``contamination_rate = r / (r +
filler_per_member)``; the default world's r = 3 is its rate 0.5). r = 0 is the no-members control:
pretraining with ``repeats: 0``, fine-tuning on the filler alone (every filler example once, the
post-training path). Each model of ``rl`` (a GRPO run's checkpoint) sees its dataset's members r
times per epoch as RL prompts (``members.repeats``), the members of the first swept seed's split
only (RL-MIA style: the evaluated members, so that the cost grows with r times one split, not the
pool); at r = 0 fillers take their places (same corpus size, no member). ``seeds`` replaces the
base config's seeds. Models in ``drop`` are removed with every reference to them. Everything
else is the base config's, so stages that do not depend on r (pools, splits, tokenizer, the
control model) have the same content keys at every r and are built once.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

SWEEP_COLUMNS = ["r", "dataset", "model", "family", "method", "auroc", "auroc_lo", "auroc_hi", "delta_auroc", "p_value"]


class SweepError(ValueError):
    """A sweep spec that does not fit its base config."""


def _members(spec: dict) -> list[dict]:
    m = spec.get("members")
    return [] if m is None else (m if isinstance(m, list) else [m])


def exposure_config(base: dict, r: int, sweep: dict) -> dict:
    """The base config at member exposure ``r`` (see the module docstring); ``sweep``: validated
    against ``schemas/sweep.schema.yaml`` (defaults filled in)."""
    cfg = copy.deepcopy(base)
    cfg.pop("overlay_of", None)  # one complete config: the base and its overlays, merged
    if sweep.get("seeds"):
        cfg["seeds"] = [int(s) for s in sweep["seeds"]]
    models = cfg["models"]
    for name, dataset in {**sweep["pretrain"], **sweep["sft"], **sweep.get("rl", {})}.items():
        if name not in models:
            raise SweepError(f"sweep: model {name!r} is not in the base config; its models: {', '.join(models)}")
    for name, dataset in sweep["pretrain"].items():
        others = [m for m in _members(models[name]) if m["dataset"] != dataset]
        models[name]["members"] = [*others, {"dataset": dataset, "repeats": int(r)}]
    for name, dataset in sweep["sft"].items():
        spec = models[name]
        if r == 0:
            spec.pop("members", None)
            spec.pop("contamination_rate", None)
        else:
            spec["members"] = {"dataset": dataset, "repeats": int(r)}
            spec["contamination_rate"] = r / (r + sweep["filler_per_member"])
    for name, dataset in sweep.get("rl", {}).items():
        if models[name]["kind"] != "rl":
            raise SweepError(f"sweep.rl: model {name!r} is a {models[name]['kind']!r} model, not a GRPO run's (kind: rl)")
        models[name]["members"] = {"dataset": dataset, "split_seed": int(cfg["seeds"][0]), "repeats": int(r)}
    for name in sweep["drop"]:
        _drop_model(cfg, name)
    return cfg


def _drop_model(cfg: dict, name: str) -> None:
    """Remove model ``name`` and every method entry that names it."""
    cfg["models"].pop(name, None)
    users = [m for m, spec in cfg["models"].items() if name in (spec.get("init"), spec.get("reference"))]
    if users:
        raise SweepError(f"sweep.drop: model {name!r} is the init or reference of {users}; drop those too")
    for section in ("n_sampling", "adra"):
        if section in cfg and "targets" in cfg[section]:
            cfg[section]["targets"] = [t for t in cfg[section]["targets"] if t["model"] != name]
    if "lara" in cfg:
        cfg["lara"]["models"] = [m for m in cfg["lara"].get("models", []) if m != name]
    if "calibdcd" in cfg:
        cfg["calibdcd"]["models"] = {m: v for m, v in cfg["calibdcd"].get("models", {}).items() if m != name}


def sweep_table(points: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """The headline tables of every exposure as one long table (``SWEEP_COLUMNS``), sorted by r."""
    parts = [h.assign(r=int(r)) for r, h in sorted(points.items()) if len(h)]
    if not parts:
        return pd.DataFrame(columns=SWEEP_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    for c in SWEEP_COLUMNS:
        if c not in out.columns:
            out[c] = np.nan
    return out[SWEEP_COLUMNS]


def onset(table: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per (dataset, model, family): the smallest r whose AUROC interval lies above chance, the
    AUROC interval at r = 0 (the no-members control), and whether the method beats the baseline
    (Δ > 0 with paired p < ``alpha``) at any r."""
    rows = []
    for (d, m, f), g in table.groupby(["dataset", "model", "family"], sort=False):
        above = g.loc[g["auroc_lo"] > 0.5, "r"]
        zero = g[g["r"] == 0]
        beats = g[(g["delta_auroc"] > 0) & (g["p_value"] < alpha)]["r"]
        rows.append({"dataset": d, "model": m, "family": f, "first_r_above_chance": int(above.min()) if len(above) else None,
                     "chance_at_r0": bool(len(zero) and zero["auroc_lo"].iloc[0] <= 0.5 <= zero["auroc_hi"].iloc[0]),
                     "beats_baseline_at": [int(x) for x in beats]})
    return pd.DataFrame(rows)


def sweep_markdown(table: pd.DataFrame, level: float) -> str:
    """AUROC [CI] per exposure, one block per (dataset, model), with each method's onset."""
    if table.empty:
        return "No headline method was scored.\n"
    rs = sorted(table["r"].unique())
    on = onset(table).set_index(["dataset", "model", "family"])
    out = [f"AUROC in % (mean over seeds, {level:.0%} bootstrap interval) against member exposure r; r = 0 is the "
           "no-members control. onset: the smallest r whose interval lies above 50%; beats baseline: the r where "
           "the paired test against the fixed passive baseline gives Δ > 0 at p < 0.05.\n"]
    for (d, m), g in table.groupby(["dataset", "model"], sort=False):
        out += [f"\n### {d} / {m}\n", "| family | " + " | ".join(f"r={r}" for r in rs) + " | onset | beats baseline |",
                "|" + "---|" * (len(rs) + 3)]
        for f, gf in g.groupby("family", sort=False):
            by_r = gf.set_index("r")
            cells = [f"{100 * by_r.loc[r, 'auroc']:.1f} [{100 * by_r.loc[r, 'auroc_lo']:.0f}, {100 * by_r.loc[r, 'auroc_hi']:.0f}]"
                     if r in by_r.index else "" for r in rs]
            o = on.loc[(d, m, f)]
            first = "–" if o["first_r_above_chance"] is None or pd.isna(o["first_r_above_chance"]) else f"r={int(o['first_r_above_chance'])}"
            beats = ", ".join(map(str, o["beats_baseline_at"])) or "–"
            out.append(f"| {f} | " + " | ".join(cells) + f" | {first} | {beats} |")
    return "\n".join(out) + "\n"


def sweep_figure(table: pd.DataFrame, headline: dict[str, str], path: str, level: float = 0.95) -> dict[str, list[str]]:
    """AUROC against r with its interval as a band, one panel per (dataset, model), one line per
    family (the headline's colours; ADRA's untrained policy dashed beside ADRA), chance dashed.
    The x axis is symmetric-log so that r = 0 sits at the left edge. Returns each panel's lines."""
    from mialab.evaluation.report import _pyplot, family_colours

    plt = _pyplot()
    colours = family_colours(list(headline))
    pairs = list(dict.fromkeys(zip(table["dataset"], table["model"])))
    cols = min(4, max(1, len(pairs)))
    rows = int(np.ceil(len(pairs) / cols)) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols + 2.0, 3.0 * rows), dpi=110, squeeze=False)
    drawn: dict[str, list[str]] = {}
    lines: dict[str, object] = {}
    for ax, (d, m) in zip(axes.ravel(), pairs):
        g = table[(table["dataset"] == d) & (table["model"] == m)]
        drawn[f"{d} / {m}"] = []
        for f, gf in g.groupby("family", sort=False):
            gf = gf.sort_values("r")
            style = "--" if "untrained" in f.lower() else "-"
            (ln,) = ax.plot(gf["r"], 100 * gf["auroc"], style, marker="o", ms=3, color=colours.get(f, "black"), label=f)
            ax.fill_between(gf["r"], 100 * gf["auroc_lo"], 100 * gf["auroc_hi"], color=colours.get(f, "black"), alpha=0.12)
            lines.setdefault(f, ln)
            drawn[f"{d} / {m}"].append(f)
        ax.axhline(50, ls=":", color="grey", lw=0.8)
        ax.set_xscale("symlog", linthresh=1)
        ax.set(title=f"{d} / {m}", xlabel="member exposure r", ylabel=f"AUROC (%), {level:.0%} CI", ylim=(0, 100))
        rs = sorted(table["r"].unique())
        ax.set_xticks(rs, [str(r) for r in rs])
        ax.set_xlim(min(rs) - 0.3, max(rs) * 1.3 + 0.3)
    for ax in axes.ravel()[len(pairs):]:
        ax.axis("off")
    order = [f for f in headline if f in lines]
    fig.legend([lines[f] for f in order], order, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
    return drawn
