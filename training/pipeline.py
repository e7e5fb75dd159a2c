"""Pipeline parallelism on the CPU path: megatron's own schedule and grad finalization under gloo.

``CpuBackend`` hands a pipeline-parallel step to :class:`CpuPipeline`, which runs megatron's
``get_forward_backward_func()`` (the non-interleaved 1F1B schedule) and
``finalize_model_grads`` (data-parallel all-reduce, the tied-embedding all-reduce between the
first and last stage, division by the all-reduced token count). Three things make that run
without CUDA; each replaces exactly what megatron-core 0.16.1 pins to the GPU on this path:

* ``pipeline_parallel/p2p_communication.py`` (``P2PCommunicator._communicate``) allocates the
  receive buffers with ``device=torch.cuda.current_device()`` and, with its default
  ``batch_p2p_comm``, calls ``torch.cuda.synchronize()``: :class:`CpuP2PCommunicator` allocates
  them on the CPU and exchanges them with megatron's own unbatched ``_p2p_ops`` (gloo
  ``isend``/``irecv``). The schedule takes a communicator as an argument.
* ``pipeline_parallel/schedules.py`` (``forward_backward_pipelining_without_interleaving``)
  creates its token counter with ``torch.zeros([], dtype=torch.int, device="cuda")``, and
  ``models/common/language_module/language_module.py``
  (``setup_embeddings_and_output_layer``) moves the tied output weight of a pipeline model
  with ``weight.data.cuda()`` before all-reducing it between the first and last stage: both
  raise ``AssertionError: Torch not compiled with CUDA enabled`` on a CPU build of torch.
  :func:`cuda_placements_on_cpu` (a torch function mode, active only around those calls)
  places such tensors on the CPU instead. Every torch call under it pays a Python dispatch:
  benchmarks/cpu_pipeline_mode.py measures its share of a forward + backward.
* megatron's ``DistributedDataParallel`` keeps gradients in CUDA buffers (``main_grad``);
  :class:`CpuStage` gives ``finalize_model_grads`` the same interface (``finish_grad_sync``,
  ``scale_gradients``, ``ddp_config``) over plain ``.grad``, which it falls back to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.pipeline_parallel.p2p_communication import P2PCommunicator, _p2p_ops
from megatron.core.process_groups_config import ProcessGroupCollection
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.overrides import TorchFunctionMode

# The process groups megatron's schedule and finalize_model_grads read from a collection.
SCHEDULE_GROUPS = ["tp", "pp", "cp", "embd", "pos_embd", "dp_cp"]


class _CudaPlacementsOnCpu(TorchFunctionMode):
    """Tensors asked for on ``cuda`` are made on the CPU; ``Tensor.cuda()`` returns the tensor."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_placements_on_cpu() -> Iterator[None]:
    """Run megatron code that hard-codes CUDA placements on the CPU path (the calls are named in
    the module docstring)."""
    with _CudaPlacementsOnCpu():
        yield


class CpuP2PCommunicator(P2PCommunicator):
    """megatron's pipeline communicator with CPU receive buffers (gloo point-to-point)."""

    def _communicate(
        self,
        *,
        tensor_send_next: torch.Tensor | None,
        tensor_send_prev: torch.Tensor | None,
        recv_prev: bool,
        recv_next: bool,
        tensor_shape: Any,
        wait_on_reqs: bool = True,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        dtype = self.config.pipeline_dtype

        def buffer() -> torch.Tensor:
            return torch.empty(tensor_shape, requires_grad=True, dtype=dtype)

        recv_from_prev = buffer() if recv_prev else None
        recv_from_next = buffer() if recv_next else None
        reqs = _p2p_ops(
            tensor_send_prev=tensor_send_prev,
            tensor_recv_prev=recv_from_prev,
            tensor_send_next=tensor_send_next,
            tensor_recv_next=recv_from_next,
            group=self.pp_group,
            prev_pipeline_rank=self.prev_rank,
            next_pipeline_rank=self.next_rank,
        )
        for req in reqs.values():
            req.wait()
        return recv_from_prev, recv_from_next, None


class CpuStage(torch.nn.Module):
    """This rank's pipeline stage as megatron's schedule and ``finalize_model_grads`` address a
    ``DistributedDataParallel`` chunk, on plain ``.grad``: gradients are summed over the
    data-parallel group once per step (``finish_grad_sync``), then scaled by 1 / tokens."""

    def __init__(self, module: torch.nn.Module) -> None:
        from megatron.core.distributed import DistributedDataParallelConfig

        super().__init__()
        self.module = module
        self.config = module.config
        self.ddp_config = DistributedDataParallelConfig()
        self.dp_group = parallel_state.get_data_parallel_group(with_context_parallel=True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def _grads(self) -> list[torch.Tensor]:
        """Every trainable parameter's gradient (zeros where backward left none, so that all
        data-parallel ranks reduce the same list)."""
        grads = []
        for p in self.module.parameters():
            if p.requires_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
        return grads

    def finish_grad_sync(self, force_all_reduce: bool = False) -> None:
        if dist.get_world_size(self.dp_group) == 1:
            return
        grads = self._grads()
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=self.dp_group)
        for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            grad.copy_(synced)

    def scale_gradients(self, scaling: float) -> None:
        for p in self.module.parameters():
            if p.grad is not None:
                p.grad.mul_(scaling)


def token_loss_forward_step(
    stats: torch.Tensor, move: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
) -> Callable[[Iterator[dict[str, torch.Tensor]], torch.nn.Module], tuple]:
    """The ``forward_step_func`` megatron's schedules call, for both backends: the summed token
    loss of a micro-batch (megatron divides by the all-reduced token count,
    ``calculate_per_token_loss``), with (loss sum, tokens) added into ``stats`` for the report.
    ``move`` puts a micro-batch's tensors where the model is (the GPU path)."""

    def forward_step(data_iterator: Iterator[dict[str, torch.Tensor]], model: torch.nn.Module) -> tuple:
        mb = {k: move(v) for k, v in next(data_iterator).items()}
        output = model(mb["tokens"], mb["position_ids"], None, labels=mb["labels"])

        def loss_func(output_tensor: torch.Tensor):
            mask = mb["loss_mask"].view(-1).float()
            token_loss = (output_tensor.float().view(-1) * mask).sum()
            stats[0] += token_loss.detach().double()
            stats[1] += mask.sum().double()
            return token_loss, mask.sum().to(torch.int), {"lm loss": token_loss.detach()}

        return output, loss_func

    return forward_step


class Schedule:
    """megatron's forward-backward schedule with :func:`token_loss_forward_step`: one pass over a
    step's micro-batches, as both backends run it (the GPU path's, and the CPU pipeline's with
    its CPU communicator and process groups in ``extra``). Reads the pipeline size when built."""

    def __init__(self, seq_length: int, micro_batch_size: int, device: str = "cpu", **extra: Any) -> None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        self.forward_backward = get_forward_backward_func()
        self.seq_length, self.micro_batch_size, self.device, self.extra = seq_length, micro_batch_size, device, extra

    def run(
        self,
        model: torch.nn.Module,
        micro_batches: list[dict[str, torch.Tensor]],
        forward_only: bool,
        move: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
    ) -> torch.Tensor:
        """This rank's (token-loss sum, token count); zeros on pipeline stages but the last."""
        stats = torch.zeros(2, dtype=torch.float64, device=self.device)
        self.forward_backward(
            forward_step_func=token_loss_forward_step(stats, move),
            data_iterator=iter(micro_batches),
            model=[model],
            num_microbatches=len(micro_batches),
            seq_length=self.seq_length,
            micro_batch_size=self.micro_batch_size,
            decoder_seq_length=self.seq_length,
            forward_only=forward_only,
            **self.extra,
        )
        return stats


class CpuPipeline:
    """One pipeline-parallel step through megatron's schedule on the CPU (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, seq_length: int, micro_batch_size: int) -> None:
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads

        self.stage = CpuStage(model)
        config = model.config
        # Gradients are the token mean over the whole global batch (the CPU path's contract):
        # token-loss sums, divided by the all-reduced token count in finalize_model_grads.
        config.calculate_per_token_loss = True
        config.finalize_model_grads_func = finalize_model_grads
        config.no_sync_func = None  # nothing to defer: finish_grad_sync reduces once per step
        config.grad_scale_func = None
        self.schedule = Schedule(
            seq_length,
            micro_batch_size,
            p2p_communicator=CpuP2PCommunicator(parallel_state.get_pipeline_model_parallel_group(), config),
            pg_collection=ProcessGroupCollection.use_mpu_process_groups(required_pgs=SCHEDULE_GROUPS),
        )

    def run(self, micro_batches: list[dict[str, torch.Tensor]], forward_only: bool) -> torch.Tensor:
        """Forward (and backward) of this rank's micro-batches; returns this rank's
        (token-loss sum, token count), non-zero on the last stage only."""
        with cuda_placements_on_cpu():
            return self.schedule.run(self.stage, micro_batches, forward_only)
