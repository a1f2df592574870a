"""`LLM`: the offline Python API, shaped like vLLM's (`from mxserve import LLM, SamplingParams`).

    llm = LLM()                                   # the packaged default model on the best device
    outs = llm.generate(["In the beginning"], SamplingParams(max_tokens=32))
    reply = llm.chat([{"role": "user", "content": "Who was Moses?"}])

`generate` accepts one prompt or a list (text or token ids) with one SamplingParams or one per
prompt, runs them together through continuous batching, and returns outputs in input order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.outputs import RequestOutput
from mxserve.engine.prompt import encode_messages
from mxserve.engine.sampling_params import SamplingParams

Prompt = str | Sequence[int]


class LLM:
    def __init__(self, model: str | None = None, *, progress: bool = True, **engine_options: Any) -> None:
        """`model`: checkpoint directory (None = packaged default). Other options: see EngineConfig
        (device, numerics, kv_cache_dtype, max_model_len, max_num_seqs, max_num_batched_tokens,
        kv_cache_memory, gpu_memory_utilization, kernel_overrides, seed, block_size)."""
        unknown = sorted(set(engine_options) - set(EngineConfig.__dataclass_fields__))
        if unknown:
            raise ValueError(f"LLM: unknown option(s) {unknown}; known: {sorted(EngineConfig.__dataclass_fields__)}")
        self.engine = LLMEngine(EngineConfig(model=model, **engine_options), progress=progress)
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self, prompts: Prompt | Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        prompt_list = _as_prompt_list(prompts)
        params_list = _as_params_list(params, len(prompt_list))
        ids = []
        try:
            for prompt, p in zip(prompt_list, params_list, strict=True):
                request_id = f"gen-{next(self._ids)}"
                self.engine.add_request(request_id, prompt, p)
                ids.append(request_id)
        except Exception:
            for request_id in ids:  # a bad prompt in the list queues nothing
                self.engine.abort_request(request_id)
            raise
        finals: dict[str, RequestOutput] = {}
        for output in self._run():
            if output.finished:
                finals[output.request_id] = output
        return [finals[i] for i in ids]

    def stream(self, prompt: Prompt, params: SamplingParams | None = None) -> Iterator[RequestOutput]:
        """Yield a snapshot of one request after every step that changed it (the last is finished)."""
        request_id = f"gen-{next(self._ids)}"
        self.engine.add_request(request_id, prompt, params or SamplingParams())
        try:
            for output in self._run():
                if output.request_id == request_id:
                    yield output
        finally:
            self.engine.abort_request(request_id)

    def chat(
        self, messages: Sequence[dict[str, Any]], params: SamplingParams | None = None, *, thinking: bool = False,
        reasoning_effort: str | None = None, tools: Sequence[dict[str, Any]] | None = None,
    ) -> RequestOutput:
        """One conversation through the DeepSeek-V4 prompt encoding of this checkpoint's generation."""
        return self.generate(self.chat_prompt(messages, thinking=thinking, reasoning_effort=reasoning_effort,
                                              tools=tools), params)[0]

    def chat_prompt(self, messages: Sequence[dict[str, Any]], *, thinking: bool = False,
                    reasoning_effort: str | None = None, tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        if self.engine.tokenizer is None:
            raise ValueError("this checkpoint ships no tokenizer.json: chat needs one")
        text = encode_messages(list(messages), thinking=thinking, reasoning_effort=reasoning_effort,
                               generation=self.engine.model_config.layout, tools=tools)
        return self.engine.tokenizer.encode(text)

    def _run(self) -> Iterator[RequestOutput]:
        while self.engine.has_unfinished_requests():
            yield from self.engine.step()


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    prompts = list(prompts)
    if not prompts:
        raise ValueError("generate: no prompts given")
    if all(isinstance(p, int) and not isinstance(p, bool) for p in prompts):
        return [prompts]  # one prompt as token ids
    return prompts


def _as_params_list(params: SamplingParams | Sequence[SamplingParams] | None, count: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    params = list(params)
    if len(params) != count:
        raise ValueError(f"generate: {len(params)} SamplingParams for {count} prompts")
    return params
