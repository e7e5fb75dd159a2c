"""Per-layer, per-role update and activation sizes during real training (``diagnostics.jsonl``).

Every ``logging.diagnostics_interval`` steps the trainer records, for every parameter, the
RMS of the weight before the step, the RMS of the update the step applied (the parameter's
real change: after the optimizer, clipping, weight decay and any skipped step) and their
ratio; and, on a fixed probe batch (the first two held-out sequences), the RMS of the
residual stream after each block and of each branch's output after its multiplier
(attention: stream after the attention add minus the block input; MLP: block output minus
that). TP-VI states its depth theory in these quantities: under depth-muP with Adam the
relative update of each hidden matrix shrinks like L^-1/2 and each block moves the stream
by O(1/L).

Mixed precision: the update is read from the optimizer's fp32 main copy of each parameter
(megatron's ``param.main_param``; a shard of it under the distributed optimizer, whose sums of
squares are all-reduced over the data-parallel group), not from the bf16 model copy: a
relative update under bf16's resolution (2^-8) would be rounded away there, and depth-muP
updates of deep models are that small.

Cost: one copy of the parameters before a logged step, a few reductions after it and one
forward pass on the probe batch (no backward); nothing on other steps. The probe runs in
eval mode under ``no_grad`` and draws no random numbers, so training is bit-identical with
diagnostics on or off (tested).

Parallel layouts: tensor-parallel shards contribute their sums of squares, all-reduced over
the tensor group; pipeline stages each measure their own layers and global rank 0 gathers
the rows. With pipeline parallelism the probe's stream is passed from stage to stage (each
stage receives the previous stage's output, as in a forward of megatron's schedule); with
sequence parallelism the stream's sums of squares are all-reduced over the tensor group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

from patches.table import global_named_parameters, layer_of

ACTIVATION_KINDS = ("residual", "attention_branch", "mlp_branch")


@dataclass(frozen=True)
class _Param:
    name: str  # global name (layer numbers across pipeline stages), wrappers removed
    layer: Optional[int]  # global 0-based block index, None outside blocks
    role: str
    tensor: torch.nn.Parameter
    sharded: bool  # tensor-parallel shard: sums of squares are all-reduced


def _parameters(model: torch.nn.Module, layer_offset: int) -> list[_Param]:
    return [
        _Param(name, layer_of(name), role, param, bool(getattr(param, "tensor_model_parallel", False)))
        for name, param, role in global_named_parameters(model, layer_offset)
    ]


class Diagnostics:
    """Records the rows of one logged step: call :meth:`before_step` and :meth:`after_step`
    around every optimizer step; they do nothing on steps that are not due."""

    def __init__(
        self,
        model: torch.nn.Module,
        interval: int,
        probe: Optional[dict[str, torch.Tensor]],
        layer_offset: int = 0,
        tp_group: Any = None,
        pp_group: Any = None,
        dp_group: Any = None,
        sequence_parallel: bool = False,
    ) -> None:
        self.model = model
        self.interval = interval
        self.probe = probe
        self.params = _parameters(model, layer_offset)
        self.layer_offset = layer_offset
        self.tp_group = tp_group
        self.dp_group = dp_group  # over which the distributed optimizer shards main params
        self.pp_group = pp_group
        self.sequence_parallel = sequence_parallel
        self._before: Optional[list[torch.Tensor]] = None
        # Found once: the probe runs every ``interval`` steps and walking the module tree each
        # time cost a tenth of its time at the tiny config's size.
        from megatron.core.models.gpt import GPTModel
        from megatron.core.transformer.transformer_layer import TransformerLayer

        self._modules = list(model.modules())
        self._layers = [m for m in self._modules if isinstance(m, TransformerLayer)]
        self._gpt = next((m for m in self._modules if isinstance(m, GPTModel)), None)

    def due(self, step: int) -> bool:
        """Whether step ``step`` (1-based: the step about to finish) is logged."""
        return self.interval > 0 and step % self.interval == 0

    def _masters(self) -> tuple[list[torch.Tensor], list[bool]]:
        """What the optimizer updates for each parameter, and whether it is a data-parallel
        shard: megatron's fp32 ``main_param`` under bf16 (looked up each time: the optimizer is
        built after this object), else the parameter itself. The distributed optimizer marks
        every bf16 parameter ``main_param_sharded`` and leaves ``main_param`` None on ranks that
        hold no part of it: those contribute an empty shard."""
        tensors, dp_sharded = [], []
        for p in self.params:
            main = getattr(p.tensor, "main_param", None)
            shard = bool(getattr(p.tensor, "main_param_sharded", False))
            if main is None and shard:
                main = p.tensor.new_empty(0, dtype=torch.float32)
            tensors.append((main if main is not None else p.tensor).detach())
            dp_sharded.append(shard)
        return tensors, dp_sharded

    def before_step(self, step: int) -> None:
        if self.due(step):
            self._before = [t.clone() for t in self._masters()[0]]

    @torch.no_grad()
    def after_step(self, step: int) -> list[dict[str, Any]]:
        """The rows of ``step`` on global rank 0 (an empty list elsewhere and on other steps)."""
        if self._before is None:
            return []
        rows = self._parameter_rows(step, self._before)
        self._before = None
        rows += self._activation_rows(step)
        if self.pp_group is not None and dist.get_world_size(self.pp_group) > 1:
            gathered: list = [None] * dist.get_world_size(self.pp_group)
            dist.all_gather_object(gathered, rows, group=self.pp_group)
            rows = [r for part in gathered for r in part]
        rows.sort(key=lambda r: (r["layer"] is not None, r["layer"] or 0, r.get("param") or r.get("kind")))
        return rows if not dist.is_initialized() or dist.get_rank() == 0 else []

    def _sums(
        self, values: list[torch.Tensor], sharded: list[bool], dp_sharded: Optional[list[bool]] = None
    ) -> list[float]:
        """RMS of each tensor: sums of squares and element counts, all-reduced over the
        data-parallel group where ``dp_sharded`` (distributed-optimizer shards), then over the
        tensor group where ``sharded``."""
        values = [v.float() if v.dtype in (torch.bfloat16, torch.float16) else v for v in values]  # bf16 GPU runs
        sq = torch.stack(torch._foreach_norm(values)).double().pow(2)  # one fused pass, not a loop of ops
        n = torch.tensor([float(v.numel()) for v in values], dtype=torch.float64, device=sq.device)
        for group, where in ((self.dp_group, dp_sharded), (self.tp_group, sharded)):
            if group is None or where is None or dist.get_world_size(group) == 1 or not any(where):
                continue
            mask = torch.tensor(where, dtype=torch.bool, device=sq.device)
            both = torch.stack([torch.where(mask, sq, 0), torch.where(mask, n, 0)])
            dist.all_reduce(both, group=group)
            sq = torch.where(mask, both[0], sq)
            n = torch.where(mask, both[1], n)
        return (sq / n).sqrt().tolist()

    def _parameter_rows(self, step: int, before: list[torch.Tensor]) -> list[dict[str, Any]]:
        sharded = [p.sharded for p in self.params]
        after, dp = self._masters()
        update = torch._foreach_sub(after, before)
        both = self._sums([*before, *update], sharded + sharded, dp + dp)  # one all-reduce per parallel group
        weight, update = both[: len(before)], both[len(before) :]
        rows = []
        for p, w, u in zip(self.params, weight, update):
            ratio = u / w if w > 0 else math.nan
            rows.append(
                {
                    "step": step,
                    "layer": p.layer,
                    "role": p.role,
                    "param": p.name,
                    "weight_rms": w,
                    "update_rms": u,
                    "update_ratio": ratio,
                }  # fmt: skip
            )
        return rows

    def _stage_forward(self) -> None:
        """The probe forward of this rank's layers: the whole model, or one pipeline stage that
        receives the stream from the previous stage and sends its output to the next."""
        pp = self.pp_group is not None and dist.get_world_size(self.pp_group) > 1
        if not pp:
            self.model(self.probe["tokens"], self.probe["position_ids"], None)
            return
        ranks = dist.get_process_group_ranks(self.pp_group)
        stage = ranks.index(dist.get_rank())
        tokens = self.probe["tokens"]
        config = self._gpt.config
        dtype = config.pipeline_dtype or torch.float32  # what megatron's schedule sends between stages
        if stage > 0:
            tp = dist.get_world_size(self.tp_group) if self.sequence_parallel and self.tp_group is not None else 1
            stream = torch.empty(
                (tokens.shape[1] // tp, tokens.shape[0], config.hidden_size), dtype=dtype, device=tokens.device
            )
            dist.recv(stream, src=ranks[stage - 1], group=self.pp_group)
            self._gpt.set_input_tensor(stream)
        try:
            out = self.model(tokens, self.probe["position_ids"], None)
        finally:
            if stage > 0:
                self._gpt.set_input_tensor(None)
        if stage < len(ranks) - 1:
            dist.send(out.to(dtype).contiguous(), dst=ranks[stage + 1], group=self.pp_group)

    def _activation_rows(self, step: int) -> list[dict[str, Any]]:
        if self.probe is None:
            return []
        layers = self._layers
        found: dict[int, dict[str, torch.Tensor]] = {i: {} for i in range(len(layers))}
        hooks = []
        for i, layer in enumerate(layers):

            def grab_in(_m, args, kwargs, i=i):
                found[i]["in"] = (kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]).detach()

            def grab_mid(_m, args, i=i):
                found[i]["mid"] = args[0].detach()

            def grab_out(_m, _args, out, i=i):
                found[i]["out"] = (out[0] if isinstance(out, tuple) else out).detach()

            hooks.append(layer.register_forward_pre_hook(grab_in, with_kwargs=True))
            hooks.append(layer.pre_mlp_layernorm.register_forward_pre_hook(grab_mid))
            hooks.append(layer.register_forward_hook(grab_out))
        # Eval mode without Module.train()'s recursive __setattr__ (the flags are restored as
        # they were), and no logits: with post_process off GPTModel returns the decoder's output,
        # as megatron runs a pipeline stage that is not the last.
        modes = [m.training for m in self._modules]
        for m in self._modules:
            object.__setattr__(m, "training", False)
        post_process = self._gpt.post_process if self._gpt is not None else None
        if self._gpt is not None:
            self._gpt.post_process = False
        try:
            self._stage_forward()
        finally:
            for h in hooks:
                h.remove()
            for m, mode in zip(self._modules, modes):
                object.__setattr__(m, "training", mode)
            if self._gpt is not None:
                self._gpt.post_process = post_process
        values, where = [], []
        for i in range(len(layers)):
            h = found[i]
            values += [h["out"], h["mid"] - h["in"], h["out"] - h["mid"]]
            where += [(i + self.layer_offset, kind) for kind in ACTIVATION_KINDS]
        rms = self._sums(values, [self.sequence_parallel] * len(values))
        return [{"step": step, "layer": layer, "kind": kind, "rms": r} for (layer, kind), r in zip(where, rms)]
