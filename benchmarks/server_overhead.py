"""What the HTTP server costs per token, without a GPU: `mxserve serve` with the model forward stubbed.

The engine is the real one (scheduler, block manager, detokenizer, `AsyncEngine` or, with
--engine-process, `ProcessEngine`, FastAPI routes, SSE) on the packaged default model, except
`runner.execute`: it sleeps --step-ms (the GIL released, as a device wait releases it) and then,
after --host-ms of Python busy work (the GIL held, as host step work holds it), returns token 5 for
every request that samples. The stub is applied by `build_engine`'s `engine_setup` hook, so with
--engine-process it replaces the forward inside the engine process, as the real forward would run
there. Point `mxserve bench serve --url` at it and compare the per-stream rate with
1000 / (step-ms + host-ms), the engine's own.

    PYTHONPATH=src python benchmarks/server_overhead.py --port 8123 --step-ms 1 [--engine-process] &
    PYTHONPATH=src python -m mxserve.cli.main bench serve --url http://127.0.0.1:8123 --concurrency 1,8,64 \
        --dataset random --prompt-len 16 --output-len 128 --scenario-reps 0
"""

from __future__ import annotations

import argparse
import functools
import logging
import time

import uvicorn

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.model_runner import StepResult
from mxserve.engine.scheduler_output import RunnerOutput
from mxserve.server.app import build_app, build_engine
from mxserve.server.metrics import ServerMetrics
from mxserve.server.state import ServerConfig


def stub_execute(step_s: float, host_s: float):
    def execute(step, sampling) -> StepResult:
        time.sleep(step_s)
        end = time.perf_counter() + host_s
        while time.perf_counter() < end:
            pass
        return StepResult(RunnerOutput({c.request_id: (5,) for c in step.chunks if c.samples_next_token}))

    return execute


def apply_stub(engine: LLMEngine, *, step_s: float, host_s: float) -> None:
    """The engine_setup hook (module level, so the engine process can unpickle it)."""
    engine.runner.execute = stub_execute(step_s, host_s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--step-ms", type=float, default=1.0, help="stubbed device wait per step (GIL released)")
    p.add_argument("--host-ms", type=float, default=0.0, help="stubbed host work per step (GIL held)")
    p.add_argument("--engine-process", action=argparse.BooleanOptionalAction, default=False,
                   help="the engine loop in its own process (mxserve serve --engine-process)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO)
    metrics = ServerMetrics()
    server_config = ServerConfig(served_model_names=("stub",), engine_process=args.engine_process)
    stub = functools.partial(apply_stub, step_s=args.step_ms / 1e3, host_s=args.host_ms / 1e3)
    engine = build_engine(EngineConfig(device="cpu"), server_config, metrics, engine_setup=stub)
    uvicorn.run(build_app(engine, server_config, metrics), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
