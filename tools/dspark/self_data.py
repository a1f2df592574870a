"""Training windows the target writes itself (self-distillation data for the DSpark draft).

Why: the draft is scored only on whether it predicts the target's greedy token, in contexts the
target produced. Windows of corpus text train it on contexts the target would not write (its
greedy token equalled the corpus on 52% of rows), and the corpus of `prepare_corpus.py` must be
rebuilt from Debian packages. Windows sampled from the target need no corpus, come in any amount,
and look like what the draft meets at inference:
- "sampled" windows: BOS, then seq_len−1 tokens sampled at `temperature` (diverse contexts);
- "greedy" windows: BOS + the first `prefix` tokens of a sampled window, then greedy decoding
  (the repetitive continuations greedy serving actually produces).
Every request has its own seed, so a set is replayable; held-out sets use disjoint seeds.
"""

from __future__ import annotations

import time

import torch

from mxserve import LLM, SamplingParams


def self_windows(llm: LLM, num: int, seq_len: int, bos: int, *, seed: int, greedy_share: float = 0.5,
                 temperature: float = 1.0, prefix: tuple[int, int] = (8, 64), round_size: int = 256,
                 deadline: float | None = None, log: bool = False) -> torch.Tensor:
    """[n, seq_len] int64 windows, each starting with BOS, n ≤ num: made in rounds of `round_size`,
    and no new round starts after `deadline` (time.monotonic(); the first round always runs). In a
    round, a `greedy_share` of the windows are greedy continuations of sampled prefixes (lengths
    drawn in `prefix`), the rest sampled. Window i's draws depend only on (seed, i)."""
    if num <= 0 or seq_len < 2 or round_size <= 0:
        raise ValueError(f"self_windows needs num, round_size > 0 and seq_len >= 2 (got {num}, {round_size}, {seq_len})")
    if not 0.0 <= greedy_share <= 1.0:
        raise ValueError(f"greedy_share must lie in [0, 1] (got {greedy_share})")
    rounds: list[torch.Tensor] = []
    t0 = time.monotonic()
    for first in range(0, num, round_size):
        if deadline is not None and rounds and time.monotonic() > deadline:
            break
        rounds.append(_round(llm, first, min(round_size, num - first), seq_len, bos, seed, greedy_share,
                             temperature, prefix))
        if log:
            print(f"self data: {first + rounds[-1].shape[0]} windows in {time.monotonic() - t0:.1f}s", flush=True)
    return torch.cat(rounds)


def _round(llm: LLM, first: int, num: int, seq_len: int, bos: int, seed: int, greedy_share: float,
           temperature: float, prefix: tuple[int, int]) -> torch.Tensor:
    num_greedy = round(greedy_share * num)
    num_sampled = num - num_greedy
    # the greedy windows' prefixes come from sampled sequences too; draw enough of them
    sampled = _sample(llm, first, max(num_sampled, num_greedy), seq_len - 1, bos, seed, temperature)
    windows = [[bos, *ids] for ids in sampled[:num_sampled]]
    if num_greedy:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + first)
        lengths = torch.randint(prefix[0], min(prefix[1], seq_len - 2) + 1, (num_greedy,), generator=gen).tolist()
        prompts = [[bos, *sampled[i][:n]] for i, n in enumerate(lengths)]
        params = [SamplingParams(max_tokens=seq_len - len(p), temperature=0, ignore_eos=True) for p in prompts]
        outs = llm.generate(prompts, params)
        windows += [p + list(o.outputs[0].token_ids) for p, o in zip(prompts, outs, strict=True)]
    out = torch.tensor(windows, dtype=torch.int64)
    assert out.shape == (num, seq_len), out.shape
    return out


def _sample(llm: LLM, first: int, num: int, new_tokens: int, bos: int, seed: int, temperature: float) -> list[list[int]]:
    params = [SamplingParams(max_tokens=new_tokens, temperature=temperature, seed=seed * 1_000_003 + first + i,
                             ignore_eos=True) for i in range(num)]
    return [list(o.outputs[0].token_ids) for o in llm.generate([[bos]] * num, params)]
