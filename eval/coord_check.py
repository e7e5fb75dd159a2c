"""Coordinate check across depth (and width): does the residual stream stay O(1)?

For each depth (and width), build the patched model from a run config, record the RMS of
every layer's output (the residual stream) on a fixed batch at initialization, take K
optimizer steps on random tokens with the run's real parameter groups and constant LR,
and record after each step the RMS of the stream and the RMS of its change from
initialization. Under a correct depth parametrization both stay flat as depth grows;
under SP, Megatron's ``1/sqrt(2L)`` output init keeps the stream flat at init but the
change after a few Adam steps grows with depth. The slope of log2(metric) against
log2(depth) summarizes it; the CLI exits non-zero when a slope exceeds a threshold.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.coord_check_plots import plot
from eval.coord_check_rules import QUANTITIES, breaks, describe, expectations, slopes, violations
from eval.outputs import write_json
from runconfig import ConfigError, load_config
from runconfig.schema import RunConfig
from rundir.contract import ExitCode

if TYPE_CHECKING:
    import torch

HELP = (
    "RMS of the stream, each block, attention and MLP outputs, logits and their changes after K steps against "
    "depth (and width); exits 1 when a slope breaks what the parametrization predicts"
)


@dataclasses.dataclass
class CoordRecord:
    num_layers: int
    hidden_size: int
    step: int
    layer_rms: list[float]  # RMS of each layer's output on the fixed batch (the residual stream)
    layer_delta_rms: list[float]  # RMS of (output - output at init)
    logits_rms: float = 0.0  # RMS of the output logits (after the logit multiplier)
    logits_delta_rms: float = 0.0  # RMS of (logits - logits at init)
    attn_logits_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: RMS of scale*q.k (causal)
    attn_logits_delta_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: change from init
    block_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: RMS of output - input
    block_delta_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: its change from init
    block_update_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: what its own weight
    # change does on its current input, (Delta W) x: block(W_t; x_t) - block(W_0; x_t)
    attn_out_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: attention branch output
    attn_out_delta_rms: list[float] = dataclasses.field(default_factory=list)  # (before the branch multiplier)
    mlp_out_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: MLP branch output
    mlp_out_delta_rms: list[float] = dataclasses.field(default_factory=list)  # (before the branch multiplier)

    @property
    def last_rms(self) -> float:
        return self.layer_rms[-1]

    @property
    def last_delta_rms(self) -> float:
        return self.layer_delta_rms[-1]


def _with(cfg: RunConfig, num_layers: int, hidden_size: int | None) -> RunConfig:
    model = dataclasses.replace(cfg.model, num_layers=num_layers)
    if hidden_size is not None:
        model = dataclasses.replace(model, hidden_size=hidden_size, ffn_hidden_size=None)
    return dataclasses.replace(cfg, model=model)


def layer_outputs(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every transformer layer's output for ``tokens`` (``[s, b, h]`` each, fp32, detached)."""
    return coordinates(model, tokens).stream


def attention_logits(query: torch.Tensor, key: torch.Tensor, scale: float) -> torch.Tensor:
    """The pre-softmax attention logits ``scale * q.k`` at the causal entries (key position <=
    query position), flattened; ``query`` ``[s, b, heads, d]``, ``key`` ``[s, b, groups, d]``."""
    import torch

    q, k = query.detach().float(), key.detach().float()
    if k.shape[2] != q.shape[2]:  # grouped-query attention: each key group serves heads / groups heads
        k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)
    logits = torch.einsum("sbhd,tbhd->bhst", q, k) * scale
    causal = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril()
    return logits[..., causal]


@dataclasses.dataclass
class Coordinates:
    """One forward pass's coordinates, per transformer layer (fp32, detached): its input, its
    output (the residual stream), its block contribution (output - input, the branch
    multiplier included), its attention and MLP branch outputs (bias added, before the branch
    multiplier: what microsoft/mup's check hooks on ``attn.c_proj`` / ``mlp.c_proj``) and its
    attention logits (:func:`attention_logits`; none when the core attention is not the
    toolkit's ``SDPAttention``); and the output logits (after the logit multiplier)."""

    inputs: list[torch.Tensor]
    stream: list[torch.Tensor]
    attn_out: list[torch.Tensor]
    mlp_out: list[torch.Tensor]
    attn_logits: list[torch.Tensor]
    logits: torch.Tensor

    @property
    def block(self) -> list[torch.Tensor]:
        return [out - x for out, x in zip(self.stream, self.inputs)]


def coordinates(
    model: torch.nn.Module, tokens: torch.Tensor, layer_inputs: list[torch.Tensor] | None = None
) -> Coordinates:
    """One forward pass on ``tokens``. ``layer_inputs``: each transformer layer's input is
    replaced by the given tensor (teacher forcing: the model at init fed the inputs the trained
    model's layers see gives each block's contribution without its own weight change)."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from training.attention import SDPAttention

    layers = [m for m in model.modules() if isinstance(m, TransformerLayer)]
    found: dict[str, dict[int, torch.Tensor]] = {k: {} for k in ("inputs", "stream", "attn_out", "mlp_out")}
    attn: list[torch.Tensor] = []

    def keep(kind: str, index: int) -> Any:
        def hook(_m: Any, _args: Any, out: Any) -> None:
            value, bias = out if isinstance(out, tuple) else (out, None)
            value = value if bias is None else value + bias
            found[kind][index] = value.detach().float()

        return hook

    def layer_input(index: int) -> Any:
        def hook(_m: Any, args: tuple, kwargs: dict) -> Any:
            if layer_inputs is not None:
                if args:
                    args = (layer_inputs[index], *args[1:])
                else:
                    kwargs = {**kwargs, "hidden_states": layer_inputs[index]}
            found["inputs"][index] = (args[0] if args else kwargs["hidden_states"]).detach().float()
            return args, kwargs

        return hook

    def on_attention(module: SDPAttention, args: tuple, kwargs: dict) -> None:
        query = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs["key"]
        attn.append(attention_logits(query, key, module.softmax_scale))

    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(layer_input(i), with_kwargs=True))
        hooks.append(layer.register_forward_hook(keep("stream", i)))
        for kind, name in (("attn_out", "self_attention"), ("mlp_out", "mlp")):
            branch = getattr(layer, name, None)
            if isinstance(branch, torch.nn.Module):
                hooks.append(branch.register_forward_hook(keep(kind, i)))
    hooks += [
        m.register_forward_pre_hook(on_attention, with_kwargs=True)
        for m in model.modules()
        if isinstance(m, SDPAttention)
    ]
    try:
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        logits = model(tokens, positions, None)
    finally:
        for h in hooks:
            h.remove()
    per_layer = {k: [v[i] for i in sorted(v)] for k, v in found.items()}
    return Coordinates(**per_layer, attn_logits=attn, logits=logits.detach().float())


def _rms(t: torch.Tensor) -> float:
    return float(t.pow(2).mean().sqrt())


def _rms_each(now: list[torch.Tensor], base: list[torch.Tensor] | None = None) -> list[float]:
    return [_rms(a) for a in now] if base is None else [_rms(a - b) for a, b in zip(now, base)]


def record(
    num_layers: int, hidden_size: int, step: int, now: Coordinates, init: Coordinates, at_init: list | None
) -> CoordRecord:
    """The record of ``now`` against ``init``; ``at_init``: each block's contribution with the
    weights at init on the input it has now (``None`` at step 0: no update yet), so that
    ``now.block - at_init`` is what the block's own weight change does, ``(Delta W) x``."""
    return CoordRecord(
        num_layers, hidden_size, step,
        _rms_each(now.stream), _rms_each(now.stream, init.stream),
        _rms(now.logits), _rms(now.logits - init.logits),
        _rms_each(now.attn_logits), _rms_each(now.attn_logits, init.attn_logits),
        _rms_each(now.block), _rms_each(now.block, init.block),
        _rms_each(now.block, at_init) if at_init is not None else [0.0] * len(now.stream),
        _rms_each(now.attn_out), _rms_each(now.attn_out, init.attn_out),
        _rms_each(now.mlp_out), _rms_each(now.mlp_out, init.mlp_out),
    )  # fmt: skip


def measure(
    cfg: RunConfig,
    num_layers: int,
    hidden_size: int | None = None,
    steps: int = 5,
    batch_size: int = 8,
    seed: int = 0,
    lr: float | None = None,
    fixed_batch: bool = False,
) -> list[CoordRecord]:
    """Records at step 0..steps for one shape (needs an initialized megatron parallel state).

    ``fixed_batch``: every step trains on the measured batch itself (full-batch gradient
    descent on it, the setting of NTK/dNTK theory) instead of fresh random tokens.
    """
    import torch

    from training.model import build_model, resolve
    from training.optim import CpuOptimizer

    run = _with(cfg, num_layers, hidden_size)
    if lr is not None:
        run = dataclasses.replace(run, optimizer=dataclasses.replace(run.optimizer, lr=lr))
    vocab = run.model.vocab_size or 256
    seq = run.model.seq_length
    data_gen = torch.Generator().manual_seed(10_000 + seed)  # same tokens for every shape
    fixed_seq = torch.randint(0, vocab, (batch_size, seq + (1 if fixed_batch else 0)), generator=data_gen)
    fixed = fixed_seq[:, :seq]
    torch.manual_seed(seed)
    resolved = resolve(run)
    model = build_model(run, vocab, resolved=resolved)
    optimizer = CpuOptimizer(run, [model], resolved)
    for group in optimizer.param_groups:  # constant LR: each group's peak LR, no schedule
        group["lr"] = group["max_lr"]
        group["weight_decay"] = run.optimizer.weight_decay * group.get("wd_mult", 1.0)

    initial = [p.detach().clone() for p in model.parameters()]  # for each block's (Delta W) x

    def with_initial_weights(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each block's contribution with the weights at init on ``inputs`` (the model's own
        weights are swapped out and back)."""
        trained = [p.detach().clone() for p in model.parameters()]
        for p, w in zip(model.parameters(), initial):
            p.copy_(w)
        try:
            return coordinates(model, fixed, inputs).block
        finally:
            for p, w in zip(model.parameters(), trained):
                p.copy_(w)

    def snapshot(step: int, init: Coordinates | None) -> tuple[CoordRecord, Coordinates]:
        model.eval()
        with torch.no_grad():
            now = coordinates(model, fixed)
            at_init = None if init is None else with_initial_weights(now.inputs)
        model.train()
        return record(num_layers, run.model.hidden_size, step, now, init or now, at_init), now

    first, init = snapshot(0, None)
    records = [first]
    positions = torch.arange(seq).unsqueeze(0).expand(batch_size, seq)
    for step in range(1, steps + 1):
        tokens = fixed_seq if fixed_batch else torch.randint(0, vocab, (batch_size, seq + 1), generator=data_gen)
        loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        records.append(snapshot(step, init)[0])
    return records


def check_axes(depths: list[int], widths: list[int] | None, steps: int = 1) -> str | None:
    """Why the shapes give no slope to check (None when they give one)."""
    for flag, values in (("--depths", depths), ("--widths", widths or [])):
        if any(v <= 0 for v in values):
            return f"{flag}: every value must be a positive integer, got {values}"
        if len(set(values)) != len(values):
            return f"{flag}: {values} repeats a value"
    if steps < 1:
        return f"--steps: {steps}; the change after K steps needs K >= 1"
    if len(depths) < 2 and len(widths or []) < 2:
        return (
            f"--depths {depths} --widths {widths or '(the config width)'}: a slope needs two points; "
            "give at least two --depths (depth check) or two --widths (width check)"
        )
    return None


def prepare(cfg: RunConfig, depths: list[int], widths: list[int] | None, steps: int = 1) -> RunConfig:
    """The config every shape is built from; raises ValueError naming the flag and value when
    the shapes give no slope or a shape cannot be built (e.g. a width the heads do not divide).
    A base width (depth) the config leaves unset is the smallest of two --widths (--depths):
    unset, every shape would be its own base (m_d = 1, m_L = 1), where every preset is SP."""
    from runconfig.schema import resolve

    why = check_axes(depths, widths, steps)
    if why:
        raise ValueError(why)
    par = cfg.parametrization
    if len(widths or []) >= 2 and par.base_hidden_size is None:
        par = dataclasses.replace(par, base_hidden_size=min(widths or []))
    if len(depths) >= 2 and par.base_num_layers is None:
        par = dataclasses.replace(par, base_num_layers=min(depths))
    cfg = dataclasses.replace(cfg, parametrization=par)
    for width in widths or [None]:
        for depth in depths:
            try:
                resolve(_with(cfg, depth, width))
            except ValueError as exc:
                shape = f"--depths {depth}" + (f" --widths {width}" if width is not None else "")
                raise ValueError(f"{shape}: {exc}") from None
    return cfg


def expected_for(cfg: RunConfig, expect: str | None = None) -> dict[str, dict[str, Any]]:
    """The table columns ``cfg`` is judged against (:func:`eval.coord_check_rules.expectations`):
    its own parametrization's, or preset ``expect``'s."""
    from patches.names import OPTIMIZER_FAMILIES
    from patches.presets import PRESETS, canonical_preset

    par = cfg.parametrization
    if expect is None:
        alpha, gamma, width, name = par.resolved_alpha, par.resolved_gamma, par.resolved_width, par.preset
    else:
        try:
            preset = PRESETS[canonical_preset(expect)]
        except ValueError as exc:  # its message names the config key; here the flag gave the name
            raise ValueError(f"--expect: {str(exc).split(': ', 1)[1]}") from None
        if preset.alpha is None or preset.gamma is None:
            raise ValueError(f"--expect: {expect!r} has no alpha and gamma of its own; name a preset that has")
        alpha, gamma, width, name = preset.alpha, preset.gamma, preset.width, preset.name
    return expectations(alpha, gamma, width, OPTIMIZER_FAMILIES[cfg.optimizer.name], name, cfg.model.block)


def run_check(
    cfg: RunConfig,
    depths: list[int],
    widths: list[int] | None,
    steps: int,
    seed: int = 0,
    progress: bool = True,
    expect: str | None = None,
    tolerance: float = 0.25,
) -> dict[str, Any]:
    """All shapes in a one-process group; returns records, slopes of every quantity against
    depth per width (``slopes``, with two depths or more) and against width per depth
    (``width_slopes``, with two widths or more), the columns they are judged against
    (``expected``) and the quantities that break them (``violations``)."""
    from tqdm import tqdm

    from training.distributed import single_process

    cfg = prepare(cfg, depths, widths, steps)
    shapes = [(d, w) for w in (widths or [None]) for d in depths]
    results: dict[str, Any] = {
        "depths": depths, "widths": widths, "steps": steps, "shapes": [], "slopes": {}, "width_slopes": {},
        "preset": cfg.parametrization.preset, "optimizer": cfg.optimizer.name, "lr": cfg.optimizer.lr,
        "base_hidden_size": cfg.parametrization.base_hidden_size,
        "base_num_layers": cfg.parametrization.base_num_layers,
        "expected": expected_for(cfg, expect), "max_slope": tolerance,
    }  # fmt: skip
    with single_process():
        for depth, width in tqdm(shapes, desc="coord-check", disable=not progress):
            recs = measure(cfg, depth, width, steps=steps, seed=seed)
            results["shapes"].append(
                {
                    "num_layers": depth,
                    "hidden_size": recs[0].hidden_size,
                    "records": [dataclasses.asdict(r) for r in recs],
                }
            )
    hidden_sizes = sorted({s["hidden_size"] for s in results["shapes"]})
    if len(depths) >= 2:
        results["slopes"] = {str(n): slopes(results["shapes"], "num_layers", "hidden_size", n) for n in hidden_sizes}
    if len(hidden_sizes) >= 2:
        results["width_slopes"] = {str(d): slopes(results["shapes"], "hidden_size", "num_layers", d) for d in depths}
    results["violations"] = violations(results, tolerance)
    return results


def table_lines(results: dict[str, Any]) -> list[str]:
    """The printed table: per fixed width (depth axis) and fixed depth (width axis), each
    quantity's measured slope, its expected slope and whether it breaks it."""
    lines = []
    tolerance = results["max_slope"]
    for axis, key, fixed_name, points in (
        ("depth", "slopes", "width", results["depths"]),
        ("width", "width_slopes", "depth", results["widths"]),
    ):
        expected = results["expected"][axis]
        cells = expected["cells"] or {}
        for fixed, measured in results[key].items():
            lines.append(
                f"slopes of log2 RMS vs log2 {axis} ({axis}s {' '.join(map(str, points))}) at {fixed_name} {fixed}, "
                f"after {results['steps']} steps; expected: {expected['rule']}"
                + (f" - not judged: {expected['why']}" if expected["cells"] is None else f", tolerance {tolerance}")
                + (f"; {expected['why']}" if expected["cells"] is not None and expected["why"] else "")
            )
            lines.append(f"  {'quantity':<20}{'slope':>7}  {'expected':<14}{'':<8}meaning")
            for name, s in measured.items():
                cell = cells.get(name)
                verdict = "BREAKS" if breaks(s, cell, tolerance) else ("ok" if cell is not None else "")
                shown = describe(cell) if expected["cells"] is not None else "-"
                lines.append(f"  {name:<20}{s:+7.2f}  {shown:<14}{verdict:<8}{QUANTITIES[name].meaning}")
    return lines


def shape_value(text: str) -> int:
    """A --depths / --widths value; a ``key=value`` override there (the list took it in) is
    refused saying where overrides go."""
    if "=" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a key=value override, read here as one more value of the list: give the overrides "
            "right after --config FILE, or at the end after an option that takes one value (--steps K)"
        )
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="run config YAML (model, parametrization, optimizer)")
    parser.add_argument("--depths", type=shape_value, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument(
        "--widths", type=shape_value, nargs="*", default=None,
        help="hidden sizes (default: the config's); two or more add the width check (slopes vs width per depth)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps K")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default=None,
        help="directory for coord_check.json, coord_check.png (depth axis) and coord_check_width.png (width axis)",
    )  # fmt: skip
    parser.add_argument(
        "--max-slope", type=float, default=0.25, metavar="TOL",
        help="tolerance: fail (exit 1) when a quantity's slope of log2 RMS vs log2 depth (or width) is further "
        "than this from the slope its parametrization predicts (docs/eval.md, 'What each row predicts')",
    )  # fmt: skip
    parser.add_argument(
        "--expect", default=None, metavar="PRESET",
        help="judge against this preset's expected slopes instead of the config's own (e.g. --expect depth_mup on "
        "an sp config: is plain Megatron depth-stable?)",
    )  # fmt: skip
    parser.add_argument(
        "--yaida-s", type=float, nargs="+", default=None, metavar="S",
        help="check Yaida's family instead (eval/coord_check_yaida.py): feature change vs --widths at the "
        "first --depths, per s; exits 1 when a slope is off -(1-s) by more than --max-slope-error",
    )  # fmt: skip
    parser.add_argument("--seeds", type=int, default=2, help="--yaida-s: seeds averaged per width")
    parser.add_argument("--max-slope-error", type=float, default=0.15, help="--yaida-s: tolerance on each slope")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides of the run config")


# --yaida-s sets these keys for every run it makes (eval/coord_check_yaida.yaida_config): the
# config is loaded without them, so that a value it or an override holds (width=yaida with no s
# yet) is neither refused nor blamed on the file.
YAIDA_OWNED = ("parametrization.width=null", "parametrization.yaida_s=null")


def run(args: argparse.Namespace) -> ExitCode:
    overrides = [*args.overrides, *(YAIDA_OWNED if args.yaida_s is not None else ())]
    try:
        cfg = load_config(RunConfig, args.config, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.yaida_s is not None:
        return _run_yaida(cfg, args)
    try:
        prepare(cfg, args.depths, args.widths, args.steps)
        expected_for(cfg, args.expect)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    results = run_check(cfg, args.depths, args.widths, args.steps, args.seed, expect=args.expect,
                        tolerance=args.max_slope)  # fmt: skip
    print("\n".join(table_lines(results)))
    failures = results["violations"]
    for line in failures:
        print(f"  {line}")
    title = f"coordinate check: {cfg.parametrization.preset}" + (f", judged as {args.expect}" if args.expect else "")

    def draw(out_dir: Path) -> list[Path]:
        written = []
        for axis, key, name in (
            ("depth", "slopes", "coord_check.png"),
            ("width", "width_slopes", "coord_check_width.png"),
        ):
            if results[key]:
                plot(results, axis, out_dir / name, title)
                written.append(out_dir / name)
        return written

    judged = [results["expected"][a]["rule"] for a, k in (("depth", "slopes"), ("width", "width_slopes"))
              if results[k] and results["expected"][a]["cells"] is not None]  # fmt: skip
    if not judged:
        summary = "nothing judged (no expected slopes for this parametrization: see the table's header)"
    elif failures:
        summary = f"{len(failures)} slope(s) break what {' and '.join(judged)} predicts (tolerance {args.max_slope})"
    else:
        summary = f"every slope is what {' and '.join(judged)} predicts (tolerance {args.max_slope})"
    measured = [results["expected"][a] for a, k in (("depth", "slopes"), ("width", "width_slopes")) if results[k]]
    if any(e["cells"] is not None and e["why"] for e in measured):
        summary += "; rows marked 'not judged' are printed only (the table's header says why)"
    return _verdict(results, args.out, draw, not failures, summary + _stability(results))


STABLE = {"depth": "depth_mup", "width": "mup"}  # the preset --expect names to ask "is it stable?"


def _stability(results: dict[str, Any]) -> str:
    """A reminder when the judged parametrization is not stable by design (its stream change
    grows with depth or width: SP): a PASS then says it grows as predicted, not that it is stable."""
    notes = [
        f"the stream change grows with {axis} ({describe(cell)}) by design; --expect {STABLE[axis]} judges it as "
        f"a {axis}-stable model"
        for axis, key in (("depth", "slopes"), ("width", "width_slopes"))
        if results[key] and (cell := (results["expected"][axis]["cells"] or {}).get("stream_change")) not in (None, 0.0)
    ]
    return f"; not stable: {', and '.join(notes)}" if notes else ""


def _verdict(results: dict[str, Any], out: str | None, draw: Any, passed: bool, summary: str) -> ExitCode:
    """Record pass/fail, write coord_check.json and the figures under ``out`` (``draw(out_dir)``
    returns the figure paths), print the verdict; exit code 0 pass, 1 fail."""
    results["passed"] = bool(passed)
    if out:
        out_dir = Path(out)
        write_json(out_dir / "coord_check.json", results)
        figures = draw(out_dir)
        print(f"wrote {', '.join(str(p) for p in [out_dir / 'coord_check.json', *figures])}")
    print(("PASS" if results["passed"] else "FAIL") + f": {summary}")
    return ExitCode.OK if results["passed"] else ExitCode.FAILED


def yaida_flags(args: argparse.Namespace) -> str | None:
    """Why the --yaida-s flags give no check, naming the flag at fault (None when they give one)."""
    bad = [s for s in args.yaida_s if not 0.0 <= s <= 1.0]
    if bad:
        return f"--yaida-s: {bad} outside [0, 1]"
    if len(args.widths or []) < 2:
        return f"--widths {args.widths or '(none)'}: the s axis needs at least two widths"
    if args.seeds < 1:
        return f"--seeds: {args.seeds}; give at least 1"
    return check_axes(args.depths[:1], args.widths, args.steps)


def _run_yaida(cfg: RunConfig, args: argparse.Namespace) -> ExitCode:
    from eval.coord_check_yaida import plot_yaida, prepare_yaida, run_yaida_check

    try:
        why = yaida_flags(args)
        if why:
            raise ValueError(why)
        prepare_yaida(cfg, args.yaida_s, args.widths, args.depths[0])
    except ValueError as exc:  # e.g. optimizer adamw: the family has no Adam rule
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    results = run_yaida_check(cfg, args.yaida_s, args.widths, args.depths[0], args.steps, args.seeds)
    worst = max(abs(r["slope"] - r["expected_slope"]) for r in results["s_axis"])
    results["max_slope_error"] = args.max_slope_error
    for r in results["s_axis"]:
        print(
            f"s={r['s']:g}: slope of feature change vs width {r['slope']:+.3f} (theory {r['expected_slope']:+.3f}); "
            f"change {', '.join(f'{v:.3g}' for v in r['feature_change'])} at n={r['widths']}"
        )

    def draw(out_dir: Path) -> list[Path]:
        plot_yaida(results, out_dir / "coord_check.png", args.max_slope_error)
        return [out_dir / "coord_check.png"]

    return _verdict(
        results, args.out, draw, worst <= args.max_slope_error,
        f"max |slope - theory| {worst:.3f} (tolerance {args.max_slope_error})",
    )  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser(prog="python -m eval.coord_check")
    add_arguments(p)
    sys.exit(run(p.parse_args()))
