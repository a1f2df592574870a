"""Stage `quality`: perplexity on the held-out sample shipped with the model, and a cloze set,
against the values recorded for this checkpoint (the gate that catches "every request
succeeded, the answers are garbage": field-notes §6, GSM8K 0.953 → 0.000).

Baseline: `quality.json` next to the checkpoint (the packaged default model ships one, measured
by this stage's own code with the reference kernels). Per profile span ("quick": the first
QUICK_SPAN tokens, "full": the whole sample) it records the mean next-token NLL in nats; the
gate is |NLL − recorded| <= MAX_NLL_DELTA_NATS (a perplexity far *better* than recorded is as
suspicious as a worse one: it means the wrong targets were scored). Cloze set: short completion
prompts whose expected next word is scored by its rank; accuracy = share with rank <=
CLOZE_TOP_K; gate: accuracy >= recorded − MAX_CLOZE_ACCURACY_DROP. (The default model is a base
model, so these are completion clozes; a chat checkpoint would record chat exact-answer items in
the same file.) Without a recorded baseline the stage still FAILS a perplexity above
NO_BASELINE_MAX_PPL_FRACTION × vocabulary size and says that no baseline exists.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from mxserve.engine.sampling_params import SamplingParams
from mxserve.verify.report import StageResult, Status
from mxserve.verify.session import VerifySession
from mxserve.verify.texts import HELDOUT_FILE, heldout_tokens

QUALITY_FILE = "quality.json"
QUICK_SPAN = 512  # tokens including BOS
MAX_NLL_DELTA_NATS = 0.05
CLOZE_TOP_K = 10
MAX_CLOZE_ACCURACY_DROP = 0.1
NO_BASELINE_MAX_PPL_FRACTION = 0.25

CLOZES: tuple[tuple[str, str], ...] = (
    ("And God said, Let there be", " light"),
    ("And the LORD spake unto Moses,", " saying"),
    ("the children of", " Israel"),
    ("thus saith the", " LORD"),
    ("In the beginning God created the heaven and the", " earth"),
    ("The LORD is my", " shepherd"),
    ("And Moses said unto the", " LORD"),
    ("world without", " end"),
    ("Our Father which art in", " heaven"),
    ("and the word was with", " God"),
)


@dataclass(frozen=True)
class QualityMeasurement:
    span_tokens: int
    nll_nats: float
    cloze_accuracy: float
    cloze_ranks: list[int]

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll_nats)


def span_name(session: VerifySession) -> str:
    return "full" if session.options.is_full else "quick"


def measure_quality(session: VerifySession) -> QualityMeasurement | None:
    tokens = heldout_tokens(session)
    if tokens is None:
        return None
    llm, cfg = session.llm, session.config
    limit = min(len(tokens) + 1, llm.engine.max_model_len - 1)
    span = limit if session.options.is_full else min(QUICK_SPAN, limit)
    prompt = [cfg.bos_token_id, *tokens[: span - 1]]
    cloze_prompts = []
    for text, answer in CLOZES:
        answer_ids = session.tokenizer.encode(answer)
        cloze_prompts.append([cfg.bos_token_id, *session.tokenizer.encode(text), answer_ids[0]])
    outs = llm.generate([prompt, *cloze_prompts], SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
    logprobs = [p.logprob for p in outs[0].prompt_logprobs[1:]]
    nll = -sum(logprobs) / len(logprobs)
    ranks = [o.prompt_logprobs[-1].rank for o in outs[1:]]
    accuracy = sum(r <= CLOZE_TOP_K for r in ranks) / len(ranks)
    return QualityMeasurement(len(prompt), nll, accuracy, ranks)


def read_baseline(model_dir: Path) -> dict | None:
    path = model_dir / QUALITY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def run_quality(session: VerifySession) -> StageResult:
    measured = measure_quality(session)
    if measured is None:
        return StageResult("quality", Status.NOT_APPLICABLE, [f"n/a: the checkpoint ships no {HELDOUT_FILE}; "
                           "perplexity cannot be measured"])
    cfg = session.config
    name = span_name(session)
    baseline = read_baseline(session.model_dir)
    record = (baseline or {}).get("spans", {}).get(name)
    failures: list[str] = []
    evidence = [f"held-out perplexity {measured.perplexity:.3f} (NLL {measured.nll_nats:.4f} nats/token) over "
                f"{measured.span_tokens} tokens ({name} span)",
                f"cloze accuracy {measured.cloze_accuracy:.2f} (expected word within top-{CLOZE_TOP_K}; ranks "
                f"{measured.cloze_ranks})"]
    if record is None or record.get("span_tokens") != measured.span_tokens:
        limit = NO_BASELINE_MAX_PPL_FRACTION * cfg.vocab_size
        evidence.append(f"no recorded baseline for this span in {QUALITY_FILE}; gate: perplexity < "
                        f"{limit:.0f} ({NO_BASELINE_MAX_PPL_FRACTION} x vocabulary)")
        if not measured.perplexity < limit:
            failures.append(f"perplexity {measured.perplexity:.1f} >= {limit:.0f} (no baseline recorded)")
    else:
        delta = measured.nll_nats - record["nll_nats"]
        evidence.append(f"recorded NLL {record['nll_nats']:.4f} (perplexity {math.exp(record['nll_nats']):.3f}); "
                        f"Δ {delta:+.4f} nats/token (gate |Δ| <= {MAX_NLL_DELTA_NATS})")
        if not abs(delta) <= MAX_NLL_DELTA_NATS:
            failures.append(f"held-out NLL {measured.nll_nats:.4f} vs recorded {record['nll_nats']:.4f}: Δ "
                            f"{delta:+.4f} nats/token (perplexity {measured.perplexity:.2f} vs "
                            f"{math.exp(record['nll_nats']):.2f}; gate |Δ| <= {MAX_NLL_DELTA_NATS})")
        floor = record["cloze_accuracy"] - MAX_CLOZE_ACCURACY_DROP
        evidence.append(f"recorded cloze accuracy {record['cloze_accuracy']:.2f} (gate >= {floor:.2f})")
        if not measured.cloze_accuracy >= floor - 1e-9:
            failures.append(f"cloze accuracy {measured.cloze_accuracy:.2f} < {floor:.2f} (recorded "
                            f"{record['cloze_accuracy']:.2f})")
    metrics = {"span": name, "span_tokens": measured.span_tokens, "nll_nats": measured.nll_nats,
               "perplexity": measured.perplexity, "cloze_accuracy": measured.cloze_accuracy,
               "cloze_ranks": measured.cloze_ranks, "recorded": record}
    return StageResult.judged("quality", failures, evidence, metrics)
