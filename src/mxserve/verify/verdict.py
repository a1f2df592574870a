"""The verdict on one generated continuation, from its token ids, text and logprobs (field-notes §2).

A continuation FAILS when any rule below trips; each failure is one line naming the rule, the
numbers and the threshold. Rules (thresholds are the `VerdictRules` fields):
* empty output, or fewer tokens than asked (an early EOS counts: the battery asks for answers
  long enough that a healthy model does not stop);
* too few decode tokens asked at all (`min_decode_tokens`; the first token comes from prefill,
  decode is a different code path);
* any BOS token, or a run of `max_special_run`+ consecutive special tokens (EOS runs, role
  markers), or more than `max_special_fraction` special tokens overall;
* one token repeated `min_single_token_run`+ times in a row;
* a short n-gram loop, period 2 <= p <= `max_loop_period` (token[i] == token[i - p] over a
  stretch of at least three full periods): either the output *ends* in one spanning
  `min_trailing_loop_span`+ tokens (stuck: it never recovered), or one spans
  `min_loop_span`+ tokens anywhere (a short repeat that recovers, e.g. "able to be able to be
  able to be", is what a small greedy model does and is not a failure);
* fewer than `min_distinct_fraction` distinct tokens;
* text that is empty/whitespace only, or more than `max_replacement_fraction` U+FFFD characters;
* a non-finite logprob, or (greedy only) a chosen token that was not the model's rank-1 token.
Pure Python: the engine's outputs are passed in as plain lists.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class VerdictRules:
    min_decode_tokens: int = 32
    max_special_run: int = 2
    max_special_fraction: float = 0.1
    min_single_token_run: int = 6
    max_loop_period: int = 8
    min_trailing_loop_span: int = 16
    min_loop_span: int = 24
    min_distinct_fraction: float = 0.25
    max_replacement_fraction: float = 0.1

    def describe(self) -> str:
        return (f">= {self.min_decode_tokens} tokens asked and produced; no BOS; special-token runs < "
                f"{self.max_special_run}, special fraction <= {self.max_special_fraction}; same-token run < "
                f"{self.min_single_token_run}; no loop of period 2..{self.max_loop_period} (>= 3 periods) ending the "
                f"output over {self.min_trailing_loop_span}+ tokens or anywhere over {self.min_loop_span}+; distinct fraction >= {self.min_distinct_fraction}; text non-empty, "
                f"U+FFFD <= {self.max_replacement_fraction}; finite logprobs; greedy picks rank 1")


@dataclass(frozen=True)
class Continuation:
    token_ids: Sequence[int]  # generated ids only
    text: str
    num_asked: int  # max_tokens of the request
    logprobs: Sequence[float] | None = None  # of each chosen token (nats), when recorded
    ranks: Sequence[int] | None = None  # rank of each chosen token (1 = argmax), when recorded
    is_greedy: bool = True


def judge_continuation(c: Continuation, *, bos_id: int, special_ids: frozenset[int],
                       rules: VerdictRules = VerdictRules()) -> list[str]:
    """Failures of one continuation (empty list: it passes)."""
    tokens = list(c.token_ids)
    failures: list[str] = []
    if c.num_asked < rules.min_decode_tokens:
        failures.append(f"only {c.num_asked} tokens asked (rule: >= {rules.min_decode_tokens})")
    if not tokens:
        return [*failures, "empty output (0 tokens)"]
    if len(tokens) < c.num_asked:
        failures.append(f"{len(tokens)} tokens generated, {c.num_asked} asked (stopped early; last id {tokens[-1]})")
    if bos_id in tokens:
        failures.append(f"BOS (id {bos_id}) generated at index {tokens.index(bos_id)}")
    special_run, longest_special = 0, 0
    for t in tokens:
        special_run = special_run + 1 if t in special_ids else 0
        longest_special = max(longest_special, special_run)
    if longest_special >= rules.max_special_run:
        failures.append(f"run of {longest_special} special tokens (rule: < {rules.max_special_run})")
    special_fraction = sum(t in special_ids for t in tokens) / len(tokens)
    if special_fraction > rules.max_special_fraction:
        failures.append(f"{special_fraction:.0%} special tokens (rule: <= {rules.max_special_fraction:.0%})")
    run, longest = 1, 1
    for a, b in itertools.pairwise(tokens):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    if longest >= rules.min_single_token_run:
        failures.append(f"one token repeated {longest} times in a row (rule: < {rules.min_single_token_run})")
    loop = _find_loop(tokens, rules.max_loop_period, rules.min_trailing_loop_span, rules.min_loop_span)
    if loop is not None:
        period, start, span = loop
        failures.append(f"loop of period {period} from index {start} over {span} tokens: {tokens[start:start + period]} "
                        f"(rule: none ending the output over {rules.min_trailing_loop_span}+ tokens, none over "
                        f"{rules.min_loop_span}+ anywhere)")
    distinct = len(set(tokens)) / len(tokens)
    if distinct < rules.min_distinct_fraction:
        failures.append(f"only {len(set(tokens))} distinct tokens in {len(tokens)} (rule: >= "
                        f"{rules.min_distinct_fraction:.0%})")
    if not c.text.strip():
        failures.append(f"decoded text is empty or whitespace ({c.text!r})")
    elif c.text.count("\ufffd") / len(c.text) > rules.max_replacement_fraction:
        failures.append(f"{c.text.count(chr(0xFFFD))} U+FFFD characters in {len(c.text)}")
    if c.logprobs is not None:
        bad = [i for i, lp in enumerate(c.logprobs) if not math.isfinite(lp)]
        if bad:
            failures.append(f"non-finite logprob at token {bad[0]} ({c.logprobs[bad[0]]}; {len(bad)} in all)")
    if c.is_greedy and c.ranks is not None:
        off = [i for i, r in enumerate(c.ranks) if r != 1]
        if off:
            failures.append(f"greedy token {off[0]} has rank {c.ranks[off[0]]} (rule: rank 1)")
    return failures


def _find_loop(tokens: list[int], max_period: int, min_trailing_span: int,
               min_span: int) -> tuple[int, int, int] | None:
    """(period, start, span) of the first stretch that breaks the loop rules, or None."""
    for period in range(2, max_period + 1):
        matched = 0  # consecutive i with tokens[i] == tokens[i - period]
        for i in range(period, len(tokens) + 1):
            at_end = i == len(tokens)
            if not at_end and tokens[i] == tokens[i - period]:
                matched += 1
                continue
            span = matched + period  # tokens covered by the repeating stretch ending at i - 1
            if matched >= 2 * period and (span >= min_span or (at_end and span >= min_trailing_span)):
                return period, i - span, span
            matched = 0
    return None
