"""Request bodies of the OpenAI-compatible API as typed pydantic models (responses are plain dicts
built in `responses.py`, shaped as OpenAI documents them).

Field names, types and defaults follow OpenAI's API; the sampling extensions (`top_k`, `min_p`,
`ignore_eos`, `min_tokens`, `stop_token_ids`, `skip_special_tokens`, `include_stop_str_in_output`,
`chat_template_kwargs`) are vLLM's. Ranges checked here are the ones a type can state; the rest
(e.g. `top_p` in (0, 1]) is `SamplingParams`' job, and its ValueError becomes a 400 naming the field.
Unknown fields are ignored, as vLLM does (clients such as lm-eval send extra keys).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_LOGPROBS = 20  # OpenAI allows 20 top logprobs; so does SamplingParams

Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
TokenId = Annotated[int, Field(ge=0, le=INT64_MAX)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False  # send a last chunk with `usage` (and no choices)


class SamplingFields(_Request):
    """What completions and chat share; mapped onto SamplingParams by `sampling.py`."""

    model: str | None = None  # None = the first served model name
    n: int = Field(1, ge=1, le=64)
    temperature: float | None = None  # None = 1.0 (OpenAI's default)
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)  # vLLM's: EOS/stop_token_ids held back until this many output tokens
    include_stop_str_in_output: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None  # accepted and ignored (OpenAI's abuse-tracking id)


class CompletionRequest(SamplingFields):
    # A string, a batch of strings, one prompt as token ids, or a batch of token-id prompts.
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    max_tokens: int | None = Field(16, ge=0)  # OpenAI's default is 16; 0 is allowed only with echo
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)  # top-n per token (legacy API)
    echo: bool = False  # prepend the prompt (and, with logprobs, its prompt logprobs)
    suffix: str | None = None  # not supported: refused with 400 when set
    skip_special_tokens: bool = True


class FunctionCall(_Request):
    name: str
    arguments: str | dict[str, Any]  # OpenAI sends a JSON string; a dict is accepted too


class ToolCall(_Request):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(_Request):
    type: Literal["text"]
    text: str


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool", "latest_reminder"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None  # an earlier assistant turn's reasoning (multi-turn)


class FunctionDefinition(_Request):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(_Request):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)  # None = the rest of the context (vLLM's default)
    max_completion_tokens: int | None = Field(None, ge=1)  # OpenAI's newer name; wins over max_tokens
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    reasoning_effort: str | None = None  # mapped as vLLM maps it (docs/server.md)
    chat_template_kwargs: dict[str, Any] | None = None  # {"thinking": bool} or {"enable_thinking": bool}


class TokenizeRequest(_Request):
    model: str | None = None
    prompt: str | None = None  # either a prompt ...
    messages: list[ChatMessage] | None = None  # ... or chat messages (DeepSeek-V4 encoding)
    add_special_tokens: bool = True  # prompt only: prepend BOS as completions do
    reasoning_effort: str | None = None  # messages only, as for chat
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[TokenId]
