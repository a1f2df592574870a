"""Multi-host (or any torchrun) launch: every process runs this module under torchrun.

    torchrun --nnodes 2 --nproc-per-node 4 --node-rank $NODE --master-addr $HOST0 --master-port 29500 \\
        -m mxserve.cli.launch serve --model /ckpt --tensor-parallel-size 8 --host 0.0.0.0

Rank 0 runs the given `mxserve` command (the driver: scheduler, server) and is itself the first
rank of the model; every other rank loads its shards and follows rank 0's steps. The backend is
NCCL when the rank sees a GPU, else gloo (`MXSERVE_DIST_BACKEND` overrides; it must agree with
the command's --device). The world size must equal --tensor-parallel-size.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("error: run this module under torchrun (RANK / WORLD_SIZE are not set)", file=sys.stderr)
        return 2
    if int(os.environ["RANK"]) == 0:
        from mxserve.distributed.executor import TORCHRUN_FLAG

        os.environ[TORCHRUN_FLAG] = "1"
        from mxserve.cli.main import main as cli_main

        sys.argv = ["mxserve", *argv]
        return cli_main() or 0
    from mxserve.distributed.executor import torchrun_backend
    from mxserve.distributed.groups import destroy_groups
    from mxserve.distributed.worker import RankWorker

    worker = RankWorker(None, backend=torchrun_backend())
    worker.groups.gather_objects(worker.report)  # matches rank 0's start-up gather
    try:
        worker.follow()
    finally:
        destroy_groups()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
