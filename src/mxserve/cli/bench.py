"""`mxserve bench serve` and `mxserve bench layers`: performance evidence (docs/benchmarks.md).

Both print a short table and write every number to a JSON file (`--out`); `serve` also writes a
PNG plot beside it when matplotlib is installed. Bad options give a one-line `error:` and exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.errors import EXIT_BAD_INPUT, one_line_errors
from mxserve.config.engine_config import KERNEL_BACKENDS

_KERNEL_BACKENDS_HELP = "; ".join(f"{op}: {'|'.join(backends)}" for op, backends in KERNEL_BACKENDS.items())

bench_app = typer.Typer(help="Performance evidence: a serving sweep and a full-size layer projection.",
                        no_args_is_help=True)


def _bad(message: str) -> typer.Exit:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


@bench_app.command("serve")
@one_line_errors
def serve_bench(
    url: Annotated[str | None, typer.Option("--url", help="A running server (http://host:port); default: start one.")] = None,
    model: Annotated[Path | None, typer.Option("--model", help="Checkpoint directory (served, or to serve); default: the packaged model.")] = None,
    device: Annotated[str, typer.Option("--device", help="Device of the servers bench starts: auto, cpu, cuda, cuda:N.")] = "auto",
    concurrency: Annotated[str, typer.Option("--concurrency", help="Concurrency levels, comma-separated.")] = "1,2,4,8,16,32,64",
    dataset: Annotated[str, typer.Option("--dataset", help="Prompt sets, comma-separated: random, text.")] = "text,random",
    prompt_len: Annotated[int, typer.Option("--prompt-len", help="Prompt tokens per request.")] = 128,
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request (EOS ignored).")] = 64,
    requests_per_client: Annotated[int, typer.Option("--requests-per-client", help="Requests per client per level.")] = 2,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the prompt sets.")] = 0,
    max_model_len: Annotated[int, typer.Option("--max-model-len", help="Context length of the servers bench starts.")] = 4096,
    max_num_batched_tokens: Annotated[int, typer.Option(
        "--max-num-batched-tokens", help="Step token budget B; also the scenario's long prompt length.")] = 2048,
    prefill_cap: Annotated[int, typer.Option(
        "--prefill-cap", help="long_prefill_token_threshold C of the sweep server and the scenario's capped run.")] = 256,
    scenario_reps: Annotated[int, typer.Option(
        "--scenario-reps", help="Repetitions of the short-behind-long-prefill scenario (0 = skip it).")] = 3,
    text_file: Annotated[Path | None, typer.Option("--text-file", help="Real text for the text set; default: the default model's held-out sample.")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="MXSERVE_API_KEY", help="Bearer key for --url.")] = None,
    request_timeout: Annotated[float, typer.Option("--request-timeout", help="Seconds one request may take.")] = 600.0,
    server_start_timeout: Annotated[float, typer.Option("--server-start-timeout", help="Seconds a server may take to load.")] = 600.0,
    server_arg: Annotated[list[str] | None, typer.Option(
        "--server-arg", help="One more argument for the servers bench starts, verbatim; repeat it, e.g. "
        "--server-arg=--speculative-config --server-arg='{\"method\": \"dspark\"}' for the sweep with speculation.")] = None,
    out: Annotated[Path, typer.Option("--out", help="JSON results; the PNG plot and server logs go beside it.")] = Path("serve.json"),
) -> None:
    """Concurrent streaming clients against an OpenAI-compatible server, plus the chunked-prefill scenario."""
    import logging

    from mxserve.bench.plot import plot_serve
    from mxserve.bench.serve.run import ServeBenchOptions, parse_int_list, parse_str_list, run_serve_bench

    try:
        opts = ServeBenchOptions(
            url=url, model=None if model is None else str(model), device=device,
            concurrency=parse_int_list(concurrency, "--concurrency"), datasets=parse_str_list(dataset),
            prompt_len=prompt_len, output_len=output_len, requests_per_client=requests_per_client, seed=seed,
            max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens, prefill_cap=prefill_cap,
            scenario_reps=scenario_reps, text_file=text_file, api_key=api_key, request_timeout_s=request_timeout,
            server_start_timeout_s=server_start_timeout, server_args=tuple(server_arg or ()))
    except ValueError as exc:
        raise _bad(str(exc)) from None
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would bury the table
    try:
        result = run_serve_bench(opts, out, echo=typer.echo)
    except RuntimeError as exc:
        raise _bad(str(exc)) from None
    typer.echo(plot_serve(result, out.with_suffix(".png")))
    typer.echo(f"results: {out}")


@bench_app.command("layers")
@one_line_errors
def layers_bench(
    config: Annotated[str, typer.Option("--config", help="Model config: flash (real shapes) or a tiny one (tiny-all).")] = "flash",
    layers: Annotated[int, typer.Option("--layers", help="Layers to build (kinds most frequent first: CSA, HCA, sliding for flash).")] = 2,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    prefill_tokens: Annotated[int, typer.Option("--prefill-tokens", help="Tokens of the prefill step (0 = skip).")] = 8192,
    batches: Annotated[str, typer.Option("--batches", help="Decode batch sizes, comma-separated.")] = "1,8,64",
    contexts: Annotated[str, typer.Option("--contexts", help="Decode context lengths, comma-separated.")] = "4096,65536",
    reps: Annotated[int, typer.Option("--reps", help="Timed steps per scenario (median).")] = 3,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed steps per scenario first.")] = 1,
    numerics: Annotated[str, typer.Option("--numerics", help="faithful (release QAT) or exact.")] = "faithful",
    bandwidth: Annotated[float, typer.Option("--bandwidth-tb-s", help="Bandwidth of the floor, TB/s (default: H200 copy, measured here).")] = 4.27,
    peak_tflops: Annotated[float, typer.Option("--peak-tflops", help="Compute rate of the prefill floor, TFLOP/s (default: H200 bf16 dense, measured here).")] = 790.0,
    seed: Annotated[int, typer.Option("--seed", help="Seeds weights, caches and tokens.")] = 0,
    time_budget: Annotated[float, typer.Option("--time-budget", help="Seconds for the scenarios; later ones are skipped, recorded as such.")] = 120.0,
    kernels: Annotated[str | None, typer.Option(
        "--kernels", help="Kernel overrides as the engine takes them: op=backend, comma-separated, the "
        "MXSERVE_KERNEL_OVERRIDES syntax, e.g. linear=triton,moe=triton,attention=triton (backends: "
        f"{_KERNEL_BACKENDS_HELP}); wins over MXSERVE_KERNEL_OVERRIDES op by op. Default: the engine's defaults "
        "plus MXSERVE_KERNEL_OVERRIDES. The model is built by the engine's own selection code.")] = None,
    max_model_len: Annotated[int, typer.Option(
        "--max-model-len", help="The engine's max_model_len: sizes the attention chooser and the CUDA-graph decode "
        "geometry (candidate sets grow with it). 0 = the longest step (largest context + 1, or the prefill).")] = 0,
    op_split: Annotated[str, typer.Option(
        "--op-split", help="Basis of the per-layer, per-op split: device (kernel time from torch.profiler; CUDA "
        "only), wall (host time between synchronizing timers: on a GPU mostly launch overhead), auto (device on "
        "CUDA, else wall).")] = "auto",
    out: Annotated[Path, typer.Option("--out", help="JSON results.")] = Path("layers.json"),
) -> None:
    """Full-size layers with random release-format weights: step times vs their floors, and a decode projection."""
    import torch

    from mxserve.bench.layers.kernels import parse_kernels_option
    from mxserve.bench.layers.op_split import resolve_op_split
    from mxserve.bench.layers.run import LayersBenchOptions, run_layers_bench
    from mxserve.bench.serve.run import parse_int_list

    try:
        overrides, source = parse_kernels_option(kernels)
        opts = LayersBenchOptions(config=config, num_layers=layers, device=device, prefill_tokens=prefill_tokens,
                                  decode_batches=parse_int_list(batches, "--batches"),
                                  contexts=parse_int_list(contexts, "--contexts"), reps=reps, warmup=warmup,
                                  numerics=numerics, bandwidth_tb_s=bandwidth, peak_tflops=peak_tflops, seed=seed,
                                  time_budget_s=time_budget, kernel_overrides=overrides, kernel_source=source,
                                  max_model_len=max_model_len, op_split=op_split)
        resolve_op_split(op_split, torch.device(device))  # "device" off CUDA: one error line, not a traceback
    except ValueError as exc:
        raise _bad(str(exc)) from None
    run_layers_bench(opts, out, echo=typer.echo)
    typer.echo(f"results: {out}")
