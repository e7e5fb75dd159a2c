"""Stand-in for ``srun`` inside an allocation: run the command once per task with SLURM's task variables.

Reads ``--ntasks-per-node=N`` from its options (default: ``$SLURM_NTASKS_PER_NODE`` or 1) and ``$SLURM_JOB_NUM_NODES``;
each task gets SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS as real srun sets
them. Exits with the first non-zero task exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys

if __name__ == "__main__":
    args = sys.argv[1:]
    per_node = int(os.environ.get("SLURM_NTASKS_PER_NODE", "1"))
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt.startswith("--ntasks-per-node="):
            per_node = int(opt.split("=", 1)[1])
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    ntasks = nodes * per_node
    code = 0
    for rank in range(ntasks):
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank % per_node),
                   SLURM_NODEID=str(rank // per_node), SLURM_NTASKS=str(ntasks))  # fmt: skip
        code = code or subprocess.call(args, env=env)
    sys.exit(code)
