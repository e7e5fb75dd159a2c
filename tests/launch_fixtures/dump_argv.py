"""Stand-in for a launcher or trainer binary: record argv and the rank environment as JSON.

Usage: ``dump_argv.py NAME [args ...]``; writes ``$DUMP_DIR/NAME-<pid>.json`` with
``{"name", "argv", "env"}`` (env: the torch.distributed and SLURM variables that are set).
For ``sbatch`` it also prints a job id, as ``sbatch --parsable`` does.
"""

from __future__ import annotations

import json
import os
import sys

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

if __name__ == "__main__":
    name, argv = sys.argv[1], sys.argv[2:]
    env = {k: v for k, v in os.environ.items() if k in ENV_KEYS or k.startswith("SLURM_")}
    path = os.path.join(os.environ["DUMP_DIR"], f"{name}-{os.getpid()}.json")
    with open(path, "w") as fh:
        json.dump({"name": name, "argv": argv, "env": env}, fh)
    if name == "sbatch":
        print("4242;cluster")
