"""`mxserve run`: talk to a model from the shell, tokens streamed to stdout as they are sampled.

With a PROMPT argument: one answer, then a summary line on stderr (tokens, tok/s, TTFT). Without
one on a terminal: an interactive multi-turn chat (empty line or Ctrl-D ends it). Without one and
with piped stdin: the whole of stdin is the prompt. Chat checkpoints get the DeepSeek-V4 prompt
encoding; base models (config.json `"mxserve_base_model": true`, like the packaged default) get
the text as a plain completion prompt. `--mode` overrides.
"""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.engine_options import KernelOverridesOption, SpeculativeConfigOption
from mxserve.cli.errors import EXIT_BAD_INPUT, one_line_errors, show_progress


class PromptMode(StrEnum):
    AUTO = "auto"
    CHAT = "chat"
    COMPLETE = "complete"


@one_line_errors
def run(
    prompt: Annotated[str | None, typer.Argument(help="What to ask. Omit for an interactive chat (or pipe it on stdin).")] = None,
    model: Annotated[Path | None, typer.Option("--model", help="Checkpoint directory; default: the packaged small model.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Most tokens to generate per answer.")] = 128,
    temperature: Annotated[float, typer.Option("--temperature", help="0 = greedy (deterministic).")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")] = 1.0,
    top_k: Annotated[int, typer.Option("--top-k", help="Sample among the k most likely tokens (0 = off).")] = 0,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for sampling (reproducible answers).")] = None,
    mode: Annotated[PromptMode, typer.Option("--mode", help="chat encoding, plain completion, or auto.")] = PromptMode.AUTO,
    thinking: Annotated[bool, typer.Option("--thinking", help="DeepSeek-V4 thinking mode (chat only).")] = False,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    numerics: Annotated[str, typer.Option("--numerics", help="faithful (release QAT) or exact (fp32 oracle).")] = "faithful",
    kv_cache_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", help="fp8_ds_mla, bf16 or fp32.")] = None,
    max_model_len: Annotated[int, typer.Option("--max-model-len", help="Context length per request.")] = 4096,
    cpu_threads: Annotated[int | None, typer.Option("--cpu-threads", help="CPU threads (default: 1 for small models).")] = None,
    tensor_parallel_size: Annotated[int, typer.Option(
        "--tensor-parallel-size", "-tp", help="Ranks: one process per device (CPU ranks on the CPU).")] = 1,
    enable_expert_parallel: Annotated[bool, typer.Option(
        "--enable-expert-parallel", help="Partition the routed experts over the ranks instead of splitting each.")] = False,
    speculative_config: SpeculativeConfigOption = None,
    kernel_overrides: KernelOverridesOption = None,
) -> None:
    """Chat with a DeepSeek-V4 checkpoint (default: the small model shipped with mxserve)."""
    from mxserve.engine.llm import LLM
    from mxserve.engine.sampling_params import SamplingParams
    from mxserve.kernels.chooser import parse_overrides

    try:
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
        started = time.monotonic()
        llm = LLM(None if model is None else str(model), device=device, numerics=numerics,
                  kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, cpu_threads=cpu_threads,
                  tensor_parallel_size=tensor_parallel_size, enable_expert_parallel=enable_expert_parallel,
                  speculative_config=speculative_config, kernel_overrides=parse_overrides(kernel_overrides or ""),
                  progress=show_progress())
    except ValueError as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    load_s = time.monotonic() - started
    if llm.tokenizer is None:
        typer.echo("error: this checkpoint ships no tokenizer.json; `mxserve run` needs one", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    is_base = bool(llm.engine.model_config.extra.get("mxserve_base_model", False))
    chat = mode is PromptMode.CHAT or (mode is PromptMode.AUTO and not is_base)
    typer.echo(f"loaded in {load_s:.1f} s ({'chat' if chat else 'completion'} mode)", err=True)

    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if prompt is not None:
        if not prompt.strip():
            typer.echo("error: the prompt is empty", err=True)
            raise typer.Exit(EXIT_BAD_INPUT)
        _answer(llm, [{"role": "user", "content": prompt}], params, chat=chat, thinking=thinking)
        return
    history: list[dict[str, str]] = []
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        history.append({"role": "user", "content": line})
        reply = _answer(llm, history, params, chat=chat, thinking=thinking)
        history.append({"role": "assistant", "content": reply})


def _answer(llm, messages, params, *, chat: bool, thinking: bool) -> str:
    try:
        if chat:
            prompt_ids = llm.chat_prompt(messages, thinking=thinking)
        else:
            prompt_ids = [llm.engine.model_config.bos_token_id, *llm.tokenizer.encode(messages[-1]["content"])]
        started = time.monotonic()
        shown = ""
        final = None
        for output in llm.stream(prompt_ids, params):
            text = output.outputs[0].text
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown, final = text, output
    except ValueError as exc:
        typer.echo(f"\nerror: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    sys.stdout.write("\n")
    elapsed = time.monotonic() - started
    sample = final.outputs[0]
    ttft = final.metrics.ttft_s or 0.0
    decode_s = max(elapsed - ttft, 1e-9)
    typer.echo(
        f"[{len(sample.token_ids)} tokens, prompt {len(final.prompt_token_ids)}, TTFT {ttft:.2f} s, "
        f"{max(len(sample.token_ids) - 1, 0) / decode_s:.1f} tok/s decode, finish: {sample.finish_reason}]",
        err=True,
    )
    return sample.text
