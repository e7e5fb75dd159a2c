"""Launch training jobs (local, torchrun, SLURM, DeepSpeed) and resumable LR x depth sweeps.

Entry point: ``python -m launch {job,sweep,run,status}`` (docs/launch.md). Importing this
package stays cheap: only the modules that validate run configs import ``runconfig.schema``,
and they do it inside the functions that need it.
"""
