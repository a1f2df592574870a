"""The generation battery: which requests `generate` and `determinism` run, and how.

Every case is greedy (temperature 0, seeded), asks for >= 32 tokens and records each token's
logprob and rank. Cases run in concurrency groups through the engine's continuous batching:

| group    | requests at once | cases |
|----------|------------------|-------|
| alone    | 1                | the probe (32-token chat answer) |
| pair     | 2                | probe + a two-turn chat |
| batch8   | 8                | probe + a 128-token answer + one prompt ending 8 tokens before each distinct cache boundary of this config (page, sliding window, HCA entry, indexer top-k) + different completion prompts up to 8 |
| batch64  | 64 (determinism) | probe + 63 other prompts (quick: the others ask 2 tokens, so the probe shares prefill and the first decode steps with 63 others; full: 32 tokens each) |
| repeat   | 1, sequentially  | the probe again, `num_repeats` times (quick 3, full 50) |

The probe appearing alone, with 1, 7 and 63 others and repeated is what `determinism` compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mxserve.engine.sampling_params import SamplingParams
from mxserve.verify.session import VerifySession
from mxserve.verify.texts import CHAT_QUESTIONS, COMPLETION_PROMPTS, heldout_prompt

DECODE_TOKENS = 32
LONG_ANSWER_TOKENS = 128
BOUNDARY_LEAD = 8  # boundary prompts end this many tokens before the boundary, so decode crosses it
PROBE = "probe-chat-32"


@dataclass(frozen=True)
class GenCase:
    name: str
    prompt_ids: tuple[int, ...]
    max_tokens: int
    note: str  # what the case exercises


@dataclass
class CaseRun:
    case: GenCase
    group: str
    token_ids: list[int]
    text: str
    logprobs: list[float]
    ranks: list[int]
    finish_reason: str | None


@dataclass
class BatteryResult:
    runs: list[CaseRun] = field(default_factory=list)

    def of(self, case_name: str) -> list[CaseRun]:
        return [r for r in self.runs if r.case.name == case_name]


def greedy_params(max_tokens: int) -> SamplingParams:
    """Greedy, and min_tokens = max_tokens: every case decodes its full length, because the cases that
    end a few tokens before a cache boundary only test that boundary if decoding gets past it. A base
    model may rightly end a text early (the default model ends chapter runs with EOS); holding EOS back
    keeps the case's coverage, and a broken model that wants to stop at once still fails the
    repetition and distinct-token rules on what it emits instead."""
    return SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, temperature=0.0, seed=0, logprobs=1)


def _rank_among_allowed(record, eos_id: int) -> int:
    """The chosen token's rank among the tokens greedy could pick: min_tokens holds EOS back, so when
    EOS is the raw rank-1 token the greedy pick is raw rank 2, which is rank 1 among the allowed."""
    if record.rank > 1 and record.top and max(record.top, key=record.top.get) == eos_id:
        return record.rank - 1
    return record.rank


def run_group(session: VerifySession, group: str, cases: list[GenCase]) -> list[CaseRun]:
    outs = session.llm.generate([list(c.prompt_ids) for c in cases], [greedy_params(c.max_tokens) for c in cases])
    runs = []
    for case, out in zip(cases, outs, strict=True):
        sample = out.outputs[0]
        records = sample.logprobs or []
        eos = session.config.eos_token_id
        runs.append(CaseRun(case, group, list(sample.token_ids), sample.text, [r.logprob for r in records],
                            [_rank_among_allowed(r, eos) for r in records], sample.finish_reason))
    return runs


def boundaries(session: VerifySession) -> dict[int, list[str]]:
    """Token counts where a cache structure of this config rolls over → what rolls over there."""
    cfg, engine_cfg = session.config, session.llm.engine.config
    found: dict[int, list[str]] = {}

    def add(at: int, what: str) -> None:
        if BOUNDARY_LEAD < at < session.llm.engine.max_model_len - DECODE_TOKENS:
            found.setdefault(at, []).append(what)

    add(engine_cfg.block_size, f"cache page ({engine_cfg.block_size} entries)")
    add(cfg.sliding_window, f"sliding window ({cfg.sliding_window})")
    kinds = {k.value for k in cfg.layer_kinds}
    if "hca" in kinds:
        add(cfg.compress_rate_hca, f"first HCA entry (ratio {cfg.compress_rate_hca})")
    if "csa" in kinds:
        add(cfg.index_topk * cfg.compress_rate_csa,
            f"indexer top-k ({cfg.index_topk} CSA entries x ratio {cfg.compress_rate_csa})")
    return found


def chat(session: VerifySession, messages: list[dict[str, str]]) -> tuple[int, ...]:
    return tuple(session.llm.chat_prompt(messages))


def completion(session: VerifySession, text: str) -> tuple[int, ...]:
    return (session.config.bos_token_id, *session.tokenizer.encode(text))


def probe_case(session: VerifySession) -> GenCase:
    return GenCase(PROBE, chat(session, [{"role": "user", "content": CHAT_QUESTIONS[0]}]), DECODE_TOKENS,
                   "32-token chat answer (the determinism probe)")


def battery_cases(session: VerifySession) -> dict[str, list[GenCase]]:
    probe = probe_case(session)
    two_turn = GenCase("two-turn-chat", chat(session, [
        {"role": "user", "content": CHAT_QUESTIONS[0]},
        {"role": "assistant", "content": "Moses was the servant of the LORD, who brought Israel out of Egypt."},
        {"role": "user", "content": CHAT_QUESTIONS[1]},
    ]), DECODE_TOKENS, "second turn of a chat (history in the prompt)")
    batch8 = [probe, GenCase("answer-128", completion(session, COMPLETION_PROMPTS[3]), LONG_ANSWER_TOKENS,
                             "128-token answer")]
    for at, what in sorted(boundaries(session).items()):
        batch8.append(GenCase(f"crosses-{at}", tuple(heldout_prompt(session, at - BOUNDARY_LEAD)), DECODE_TOKENS,
                              f"prompt of {at - BOUNDARY_LEAD} tokens; decode crosses {' and '.join(what)}"
                              " (and CSA entries every few tokens)"))
    for i, text in enumerate(COMPLETION_PROMPTS):
        if len(batch8) >= 8:
            break
        batch8.append(GenCase(f"prompt-{i}", completion(session, text), DECODE_TOKENS, "different completion prompt"))
    return {"alone": [probe], "pair": [probe, two_turn], "batch8": batch8[:8]}


def run_battery(session: VerifySession) -> BatteryResult:
    result = BatteryResult()
    for group, cases in battery_cases(session).items():
        result.runs += run_group(session, group, cases)
    return result
