"""`mxserve serve`: the OpenAI-compatible HTTP server (docs/server.md).

Flags that mean the same as vLLM's carry vLLM's names. Binds to 127.0.0.1 unless `--host` says
otherwise; `--api-key` (or the MXSERVE_API_KEY environment variable, which keeps the key out of
the process list) turns on Bearer authentication.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.engine_options import KernelOverridesOption, SpeculativeConfigOption
from mxserve.cli.errors import EXIT_BAD_INPUT, one_line_errors, show_progress


@one_line_errors
def serve(
    model: Annotated[Path | None, typer.Option("--model", help="Checkpoint directory; default: the packaged small model.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0 = any free port).")] = 8000,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="MXSERVE_API_KEY",
                                                help="Require 'Authorization: Bearer KEY' on the API routes.")] = None,
    served_model_name: Annotated[list[str] | None, typer.Option(
        "--served-model-name", help="Model name(s) clients use (repeatable); default: the model directory's name.")] = None,
    max_model_len: Annotated[int, typer.Option("--max-model-len", help="Context length per request (tokens).")] = 4096,
    max_num_seqs: Annotated[int, typer.Option("--max-num-seqs", help="Requests running at once.")] = 64,
    max_num_batched_tokens: Annotated[int, typer.Option("--max-num-batched-tokens",
                                                        help="Token budget per engine step.")] = 2048,
    long_prefill_token_threshold: Annotated[int, typer.Option(
        "--long-prefill-token-threshold", help="Chunked-prefill cap: most prompt tokens one request takes per step.")] = 1024,
    kv_cache_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", help="fp8_ds_mla, bf16 or fp32.")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    numerics: Annotated[str, typer.Option("--numerics", help="faithful (release QAT) or exact (fp32 oracle).")] = "faithful",
    seed: Annotated[int, typer.Option("--seed", help="Seeds requests that bring no seed.")] = 0,
    tensor_parallel_size: Annotated[int, typer.Option(
        "--tensor-parallel-size", "-tp", help="Ranks: one process per device (CPU ranks on the CPU).")] = 1,
    enable_expert_parallel: Annotated[bool, typer.Option(
        "--enable-expert-parallel", help="Partition the routed experts over the ranks instead of splitting each.")] = False,
    max_pending_requests: Annotated[int, typer.Option(
        "--max-pending-requests", help="Engine requests queued or running before new ones get 503.")] = 1024,
    max_body_bytes: Annotated[int, typer.Option("--max-body-bytes", help="Larger request bodies get 413.")] = 8 << 20,
    shutdown_grace: Annotated[float, typer.Option(
        "--shutdown-grace", help="Seconds in-flight requests get to finish on SIGINT/SIGTERM before they are aborted.")] = 10.0,
    speculative_config: SpeculativeConfigOption = None,
    kernel_overrides: KernelOverridesOption = None,
    engine_process: Annotated[bool | None, typer.Option(
        "--engine-process/--no-engine-process",
        help="Run the engine loop (scheduler, detokenizer, model steps) in its own process instead of a thread of "
        "the HTTP server, so the two stop sharing one GIL (in one process the server tops out at one core of "
        "Python). Default: on for a CUDA device, off on the CPU and with tensor parallelism. On the H200 host it served 4055-4372 / "
        "9247-9307 tok/s at 8 / 64 streams against the thread's 3786 / 7899 (the same at 1 stream); on a "
        "2-core CPU with the forward stubbed it was 4-8% slower (no core to spare; docs/benchmarks.md, "
        "session 14).")] = None,
    lazy_graph_capture: Annotated[bool, typer.Option(
        "--lazy-graph-capture", help="Capture each CUDA-graph batch bucket on first use instead of before the first "
        "request (starts faster; the first step at each new batch size then stalls every running request).")] = False,
) -> None:
    """Serve a DeepSeek-V4 checkpoint over an OpenAI-compatible HTTP API."""
    from mxserve.config.engine_config import EngineConfig
    from mxserve.kernels.chooser import parse_overrides
    from mxserve.server.app import serve as run_server
    from mxserve.server.state import ServerConfig

    try:
        engine_config = EngineConfig(model=None if model is None else str(model), device=device, numerics=numerics,
                                     kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len,
                                     max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                     long_prefill_token_threshold=long_prefill_token_threshold,
                                     seed=seed, tensor_parallel_size=tensor_parallel_size,
                                     enable_expert_parallel=enable_expert_parallel,
                                     speculative_config=speculative_config,
                                     kernel_overrides=parse_overrides(kernel_overrides or ""))
        names = tuple(served_model_name or (_default_name(model),))
        if engine_process is None:
            engine_process = engine_process_default(device, tensor_parallel_size)
        server_config = ServerConfig(served_model_names=names, api_key=api_key, max_body_bytes=max_body_bytes,
                                     max_pending_requests=max_pending_requests, shutdown_grace_s=shutdown_grace,
                                     capture_graphs_at_start=not lazy_graph_capture, engine_process=engine_process)
    except ValueError as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    run_server(engine_config, server_config, host=host, port=port, progress=show_progress(),
               graceful_timeout_s=shutdown_grace)


def engine_process_default(device: str, tensor_parallel_size: int = 1) -> bool:
    """`--engine-process` unless asked: on for a CUDA device (measured faster at 8 and 64 streams on the
    H200 host, the same at one), off on the CPU (slower on a 2-core machine: no core to spare) and with
    tensor parallelism (the engine process starting rank processes is not tested yet)."""
    if tensor_parallel_size > 1:
        return False
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def _default_name(model: Path | None) -> str:
    return "mxserve-default" if model is None else model.resolve().name
