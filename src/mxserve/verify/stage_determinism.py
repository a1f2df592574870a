"""Stage `determinism`: the probe request alone, with 1, 7 and 63 other requests, and repeated.

Runs the probe among 63 others (batch64) and `num_repeats` more times alone (quick 3, full 50),
then compares every run of the probe (alone / pair / batch8 from `generate`, batch64, repeats)
with the first alone run: are the tokens identical, are the logprobs bit-identical, and where
do they first diverge? FAILS when any run's tokens differ, or its logprobs differ by more than
the tolerance: 0 (bit-identical) while only reference kernels are selected — the references
accumulate in fp64 and are batch-invariant by construction — and MAX_LOGPROB_DELTA_NATS once
non-reference kernels are selected.
"""

from __future__ import annotations

from mxserve.verify.battery import DECODE_TOKENS, GenCase, probe_case, run_group
from mxserve.verify.comparators import first_divergence
from mxserve.verify.report import StageResult
from mxserve.verify.session import VerifySession
from mxserve.verify.stage_env import selected_backends
from mxserve.verify.texts import COMPLETION_PROMPTS
from mxserve.verify.verdict import Continuation, VerdictRules, judge_continuation

MAX_LOGPROB_DELTA_NATS = 1e-3
QUICK_REPEATS, FULL_REPEATS = 3, 50
QUICK_OTHER_TOKENS = 2


def run_determinism(session: VerifySession) -> StageResult:
    if session.battery is None:
        from mxserve.verify.battery import run_battery

        session.battery = run_battery(session)
    full = session.options.is_full
    probe = probe_case(session)
    others = []
    for i in range(63):
        text = f"{COMPLETION_PROMPTS[i % len(COMPLETION_PROMPTS)]} ({i})"
        others.append(GenCase(f"other-{i}", (session.config.bos_token_id, *session.tokenizer.encode(text)),
                              DECODE_TOKENS if full else QUICK_OTHER_TOKENS, "load for the batch64 group"))
    runs = [r for r in session.battery.of(probe.name)]
    runs += run_group(session, "batch64", [probe, *others])[:1]
    for i in range(FULL_REPEATS if full else QUICK_REPEATS):
        runs += run_group(session, f"repeat-{i + 1}", [probe])
    reference = runs[0]
    only_reference = all(b.startswith("reference") for b in selected_backends(session.options.device).values())
    tolerance = 0.0 if only_reference else MAX_LOGPROB_DELTA_NATS
    failures: list[str] = []
    evidence = [f"probe: {probe.note}; compared with its first run ({reference.group}); logprob tolerance "
                f"{tolerance} nats ({'bit-identical: only reference kernels' if only_reference else 'kernels'})"]
    rows = []
    tok = session.tokenizer
    for run in runs[1:]:
        token_div = first_divergence(reference.token_ids, run.token_ids)
        n = min(len(reference.logprobs), len(run.logprobs))
        deltas = [abs(a - b) for a, b in zip(reference.logprobs[:n], run.logprobs[:n], strict=True)]
        bit_identical = token_div is None and reference.logprobs == run.logprobs
        first_lp = next((i for i, d in enumerate(deltas) if d != 0.0), None)
        max_delta = max(deltas, default=0.0)
        row = {"group": run.group, "tokens_identical": token_div is None, "first_token_divergence": token_div,
               "logprobs_bit_identical": bit_identical, "first_logprob_difference": first_lp, "max_delta": max_delta}
        rows.append(row)
        evidence.append(f"{run.group}: tokens {'identical' if token_div is None else f'diverge at {token_div}'}, "
                        f"logprobs {'bit-identical' if bit_identical else f'first differ at {first_lp}, max |Δ| {max_delta:.3g}'}")
        if token_div is not None:
            failures.append(f"probe tokens in {run.group} diverge from {reference.group} at token {token_div} "
                            f"({reference.token_ids[token_div:token_div + 1]} vs {run.token_ids[token_div:token_div + 1]})")
        elif not max_delta <= tolerance:
            failures.append(f"probe logprobs in {run.group} differ from {reference.group} from token {first_lp} "
                            f"(max |Δ| {max_delta:.3g} nats > {tolerance})")
        problems = judge_continuation(Continuation(run.token_ids, run.text, run.case.max_tokens, run.logprobs,
                                                   run.ranks), bos_id=tok.bos_token_id,
                                      special_ids=frozenset(vars(tok.special_ids).values()), rules=VerdictRules())
        failures += [f"{run.group}: {p}" for p in problems]
    evidence.append(f"batch64: the 63 others ask {DECODE_TOKENS if full else QUICK_OTHER_TOKENS} tokens; "
                    f"repeats: {FULL_REPEATS if full else QUICK_REPEATS} sequential alone runs")
    return StageResult.judged("determinism", failures, evidence, {"runs": rows, "tolerance_nats": tolerance})
