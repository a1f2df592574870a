"""Shared pieces of the speculative tests: prompts, a scripted drafter with known acceptance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mxserve.engine.speculative import DraftProposal


def random_prompts(num: int, vocab: int, *, seed: int, min_len: int = 2, max_len: int = 14) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len, (num,), generator=gen).tolist()
    return [[0, *torch.randint(2, vocab, (n,), generator=gen).tolist()] for n in lengths]


class ScriptedDrafter:
    """Proposes the TRUE continuation (from a non-speculative run) except at positions where
    `position % period == phase`, where it proposes a wrong token: verification then accepts a
    known prefix and rejects the rest, so rollback runs with every accepted length."""

    def __init__(self, sequences: Mapping[tuple[int, ...], Sequence[int]], vocab: int, *, period: int = 3,
                 phase: int = 1) -> None:
        self.sequences = {tuple(p): list(p) + list(out) for p, out in sequences.items()}
        self.vocab, self.period, self.phase = vocab, period, phase

    def __call__(self, chunks, sampling) -> dict[str, DraftProposal]:
        proposals = {}
        for chunk in chunks:
            seq = self.sequences[tuple(sampling[chunk.request_id].prompt_token_ids)]
            drafts = []
            for i in range(chunk.num_draft_tokens):
                pos = chunk.end_pos + i
                true = seq[pos] if pos < len(seq) else 0
                drafts.append((true + 1) % self.vocab if pos % self.period == self.phase else true)
            proposals[chunk.request_id] = DraftProposal(tuple(drafts), None)
        return proposals
