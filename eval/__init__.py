"""Analyses of a sweep directory (``python -m eval COMMAND``; docs/eval.md).

Modules: ``results`` reads and validates ``results.csv``; ``curves`` collapses it into
loss-vs-LR curves per family, fraction and depth; ``optimum`` finds a curve's optimal LR;
``transfer`` computes drift, slope, bootstrap CIs and regret; ``plots`` and ``report``
write the figures and reports; ``outputs`` writes files atomically; ``transfer_cmd`` is
the ``transfer`` subcommand.
"""
