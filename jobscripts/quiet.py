"""Library messages that are not the user's concern, silenced the same way by every entry point.

Every command line (``train_gpt.py``, ``python -m training.show``, ``training.export_hf``,
``data_prep``, ``launch``, ``eval``) calls :func:`quiet_libraries` first, before it imports
megatron or transformers. Each filter names the library and the exact message, so that
everything else, the user's own warnings and a library's warnings about the user's
settings, still shows. Standard library only: the ground floor every layer may import.
"""

from __future__ import annotations

import logging
import sys
import warnings

# (message at its start, category, the warning's module): what megatron-core 0.16.1 says at
# import or model build whatever the user configured.
LIBRARY_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # optional fused kernels; the CPU path never uses them, the GPU path names a missing
    # Transformer Engine itself when model.transformer_impl asks for it
    ("Transformer Engine and Apex are not installed", UserWarning, r"megatron\."),
    ("Apex is not installed", UserWarning, r"megatron\."),
    # megatron's own default (TransformerConfig.cuda_graph_scope), not a key of our configs
    ("full scope is deprecated", UserWarning, r"megatron\."),
)


class _DeepSpeedCpuGuess(logging.Filter):
    """DeepSpeed (imported by transformers) logs "Setting accelerator to CPU" when it finds no
    GPU: dropped where torch sees none either (the truth, not news); kept where a GPU is there,
    since then DeepSpeed missed it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Setting accelerator to CPU"):
            return True
        torch = sys.modules.get("torch")
        return bool(torch is not None and torch.cuda.is_available())


def quiet_libraries() -> None:
    """Install the filters (idempotent: each filter is added once)."""
    for message, category, module in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    deepspeed = logging.getLogger("DeepSpeed")  # created here or by deepspeed: the same object
    if not any(isinstance(f, _DeepSpeedCpuGuess) for f in deepspeed.filters):
        deepspeed.addFilter(_DeepSpeedCpuGuess())
