"""SamplingParams: how one request's tokens are chosen and reported (pure Python, no torch).

vLLM-shaped and frozen: built once from the public API or an OpenAI request, validated in
`__post_init__` (a `ValueError` naming the field and the value), then read by the sampler
(temperature, top-k, top-p, min-p, seed, logprobs), the scheduler (via `stop_criteria`) and the
detokenizer (stop strings, special tokens). Nothing here changes after construction.

Also here, because it is plain integer arithmetic the engine needs without torch: the seed
arithmetic. `mix_seed` is the one 64-bit hash behind both the per-sample seeds of a request
(`request_seeds`) and the sampler's position-keyed draws, so a run can be replayed from
(seed, position) alone (architecture convention 12).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from mxserve.engine.request import StopCriteria

# OpenAI's `top_logprobs` allows at most 20; vLLM's default cap is also 20. Above that the top-n
# list costs more to compute and ship than it is worth.
MAX_NUM_LOGPROBS = 20

# Temperatures below this sample greedily (vLLM's _SAMPLING_EPS). Dividing logits by a smaller
# temperature overflows fp32 to inf, and the distribution is a point mass anyway.
MIN_SAMPLING_TEMPERATURE = 1e-5

_MASK64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: splitmix64's stream increment


def _finalize64(z: int) -> int:
    """splitmix64's output function (Steele, Lea, Flood 2014): a bijection on 64-bit ints with
    good avalanche, so nearby inputs (seed s, s+1; position p, p+1) give unrelated outputs."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix_seed(seed: int, value: int) -> int:
    """A 64-bit hash of (seed, value), in [0, 2^64). Deterministic across processes, machines and
    Python versions (no `hash()`); any ints are accepted (taken modulo 2^64)."""
    key = _finalize64((seed + _GOLDEN64) & _MASK64)
    return _finalize64((key ^ _finalize64((value * _GOLDEN64) & _MASK64)) & _MASK64)


def request_seeds(params: SamplingParams, *, rng: random.Random | None = None) -> tuple[int, ...]:
    """One seed per sample of a request (`params.n` of them), drawn once when the request arrives.

    With `params.seed` set, sample 0 uses the seed itself and sample i > 0 uses
    `mix_seed(seed, i)`, so replaying the request replays every sample. Without a seed, the
    engine calls this once per request and keeps the drawn seeds for the request's lifetime
    (preemption and recompute then redraw nothing). `rng` (default: the OS entropy source) is for
    tests. Seeds are in [0, 2^63) so they also fit a signed int64 if a later layer wants one.
    """
    if params.seed is not None:
        return tuple(params.seed if i == 0 else mix_seed(params.seed, i) >> 1 for i in range(params.n))
    source = rng if rng is not None else random.SystemRandom()
    return tuple(source.getrandbits(63) for _ in range(params.n))


def _is_int(value: object) -> bool:
    # bool is an int subclass; `top_k=True` is a bug, not k = 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fail(name: str, value: object, requirement: str) -> ValueError:
    return ValueError(f"SamplingParams.{name} must be {requirement}, got {value!r}")


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling and output options, validated on construction.

    The sampler applies, in this order (as vLLM does): temperature, then top-k, then top-p on
    the renormalised top-k distribution, then min-p; then one draw. temperature < 1e-5 (including
    0) is greedy: argmax of the raw logits, lowest token id on ties, filters and seed ignored.
    Reported logprobs are always of the raw model distribution (log_softmax of the logits before
    temperature and filters), vLLM's default.
    """

    n: int = 1  # independent samples of the prompt (>= 1); each gets its own seed (request_seeds)
    temperature: float = 1.0  # >= 0; < 1e-5 means greedy
    top_p: float = 1.0  # in (0, 1]: keep the smallest most-likely set with at least this mass; 1 = off
    top_k: int = 0  # keep the k most likely tokens; 0 or -1 = off (-1 is stored as 0)
    min_p: float = 0.0  # in [0, 1]: drop tokens below min_p × (probability of the most likely); 0 = off
    seed: int | None = None  # replayable sampling; None = the engine draws one per request
    max_tokens: int = 16  # most output tokens (>= 1)
    min_tokens: int = 0  # EOS and stop_token_ids cannot be sampled before this many output tokens (vLLM's)
    stop: tuple[str, ...] = ()  # stop strings (a single str is accepted); matched by the detokenizer
    stop_token_ids: tuple[int, ...] = ()  # token ids that end generation, even with ignore_eos
    ignore_eos: bool = False  # keep generating past EOS (benchmarks)
    logprobs: int | None = None  # per output token: its logprob plus this many top logprobs (0..20)
    prompt_logprobs: int | None = None  # per prompt token: its logprob plus this many top (0..20)
    skip_special_tokens: bool = True  # drop special tokens from the output text
    include_stop_str_in_output: bool = False  # keep the matched stop string in the text

    def __post_init__(self) -> None:
        # Accept lists and a bare string from callers (vLLM does); store tuples so the params
        # stay hashable and immutable.
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, Iterable):
            raise _fail("stop", self.stop, "a string or a sequence of strings")
        object.__setattr__(self, "stop", tuple(stop))
        if not isinstance(self.stop_token_ids, Iterable) or isinstance(self.stop_token_ids, str | bytes):
            raise _fail("stop_token_ids", self.stop_token_ids, "a sequence of token ids")
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        self._validate()
        if self.top_k == -1:  # one spelling of "off", so equal params compare equal
            object.__setattr__(self, "top_k", 0)

    def _validate(self) -> None:
        if not _is_int(self.n) or self.n < 1:
            raise _fail("n", self.n, "an int >= 1")
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value):
                raise _fail(name, value, "a finite number")
        if self.temperature < 0:
            raise _fail("temperature", self.temperature, ">= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            raise _fail("top_p", self.top_p, "in (0, 1] (1 = off)")
        if not 0 <= self.min_p <= 1:
            raise _fail("min_p", self.min_p, "in [0, 1] (0 = off)")
        if not _is_int(self.top_k) or self.top_k < -1:
            raise _fail("top_k", self.top_k, "an int >= -1 (0 or -1 = off)")
        if self.seed is not None and not _is_int(self.seed):
            raise _fail("seed", self.seed, "an int or None")
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise _fail("max_tokens", self.max_tokens, "an int >= 1")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise _fail("min_tokens", self.min_tokens, f"an int in [0, max_tokens={self.max_tokens}]")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise _fail("stop", self.stop, "non-empty strings")
        if any(not _is_int(t) or t < 0 for t in self.stop_token_ids):
            raise _fail("stop_token_ids", self.stop_token_ids, "ints >= 0")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not 0 <= value <= MAX_NUM_LOGPROBS):
                raise _fail(name, value, f"None or an int in [0, {MAX_NUM_LOGPROBS}]")
        for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise _fail(name, value, "a bool")

    @property
    def is_greedy(self) -> bool:
        """Argmax sampling: the seed and the top-k/top-p/min-p filters have no effect."""
        return self.temperature < MIN_SAMPLING_TEMPERATURE

    def stop_criteria(self, eos_token_ids: Iterable[int]) -> StopCriteria:
        """What the scheduler needs to end this request (stop strings stay with the detokenizer)."""
        return StopCriteria(
            max_tokens=self.max_tokens,
            eos_token_ids=frozenset(eos_token_ids),
            stop_token_ids=frozenset(self.stop_token_ids),
            ignore_eos=self.ignore_eos,
        )

