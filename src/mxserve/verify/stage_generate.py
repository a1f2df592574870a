"""Stage `generate`: the battery (`battery.py`), judged token by token.

FAILS when
* any run's continuation breaks a verdict rule (`verdict.py`: empty, short, BOS/EOS runs,
  loops, non-finite logprobs, greedy rank != 1), naming the case and its group;
* decode disagrees with prefill: every case's prompt + generated tokens is re-scored in one
  prefill, and the logprob each generated token got while decoding must equal the prefill's
  within MAX_DECODE_PREFILL_DELTA_NATS (the reference kernels are chunking-invariant, so this
  is a tight gate; a wrong decode position or a cache written/read at the wrong address shows
  up as "decode diverges at token k of case X");
* with --validate, the in-graph finite checks tripped during the battery (layer, site, request).
"""

from __future__ import annotations

from mxserve.engine.sampling_params import SamplingParams
from mxserve.verify.battery import BatteryResult, CaseRun, battery_cases, run_group
from mxserve.verify.report import StageResult
from mxserve.verify.session import VerifySession
from mxserve.verify.verdict import Continuation, VerdictRules, judge_continuation

MAX_DECODE_PREFILL_DELTA_NATS = 1e-3


def decode_vs_prefill(session: VerifySession, runs: list[CaseRun]) -> list[tuple[CaseRun, int | None, float, list[float]]]:
    """Per run: (run, first generated index whose logprobs disagree beyond the gate or None, max |Δ|,
    the prefill logprobs of the generated tokens)."""
    prompts = [[*r.case.prompt_ids, *r.token_ids] for r in runs]
    outs = session.llm.generate(prompts, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0))
    rows = []
    for run, out in zip(runs, outs, strict=True):
        start = len(run.case.prompt_ids)
        prefill = [p.logprob for p in out.prompt_logprobs[start:start + len(run.token_ids)]]
        deltas = [abs(a - b) if a == a and b == b else float("inf") for a, b in zip(run.logprobs, prefill, strict=True)]
        first = next((i for i, d in enumerate(deltas) if not d <= MAX_DECODE_PREFILL_DELTA_NATS), None)
        rows.append((run, first, max(deltas, default=0.0), prefill))
    return rows


def run_generate(session: VerifySession) -> StageResult:
    findings_before = len(session.observer.findings) if session.observer else 0
    tok, rules = session.tokenizer, VerdictRules()
    special = frozenset(vars(tok.special_ids).values())
    failures: list[str] = []
    evidence: list[str] = [f"verdict rules: {rules.describe()}"]
    per_run: list[dict] = []
    consistency: list[tuple[CaseRun, int | None, float, list[float]]] = []
    battery = BatteryResult()
    session.battery = battery
    groups = battery_cases(session)
    for group, cases in groups.items():
        runs = run_group(session, group, cases)
        battery.runs += runs
        for run in runs:
            problems = judge_continuation(
                Continuation(run.token_ids, run.text, run.case.max_tokens, run.logprobs, run.ranks),
                bos_id=tok.bos_token_id, special_ids=special, rules=rules)
            failures += [f"case {run.case.name} ({run.group}): {p}" for p in problems]
            per_run.append({"case": run.case.name, "group": run.group, "num_prompt": len(run.case.prompt_ids),
                            "num_tokens": len(run.token_ids), "finish": run.finish_reason, "problems": problems,
                            "text": run.text[:200]})
            evidence.append(f"{run.group}/{run.case.name}: {len(run.case.prompt_ids)} prompt + {len(run.token_ids)} "
                            f"tokens, {'OK' if not problems else 'FAIL'}: {run.text[:60]!r}")
        seen = {r.case.name for r, *_ in consistency}
        new_cases = list({r.case.name: r for r in runs if r.case.name not in seen}.values())
        for run, first, max_delta, prefill in decode_vs_prefill(session, new_cases):
            consistency.append((run, first, max_delta, prefill))
            if first is not None:
                failures.append(f"decode diverges from prefill at generated token {first} of case {run.case.name}: "
                                f"log p {run.logprobs[first]:.4f} decoding vs {prefill[first]:.4f} re-scored in one "
                                f"prefill (max |Δ| {max_delta:.4g} nats; gate {MAX_DECODE_PREFILL_DELTA_NATS})")
        if failures and session.options.fail_fast:
            skipped = [g for g in groups if g not in {r.group for r in battery.runs}]
            evidence.append(f"--fail-fast: groups {skipped} not run after group {group} failed")
            break
    worst = max((d for _, _, d, _ in consistency), default=0.0)
    evidence.append(f"decode vs prefill re-scoring of {len(consistency)} cases: max |Δ log p| {worst:.3g} nats "
                    f"(gate {MAX_DECODE_PREFILL_DELTA_NATS})")
    evidence += [f"case {c.name}: {c.note}" for c in {r.case.name: r.case for r in battery.runs}.values()]
    if session.observer is not None:
        new = session.observer.findings[findings_before:]
        failures += [f"in-graph check: {f.describe()}" for f in new[:5]]
        evidence.append(f"in-graph validation: {session.observer.num_checks} checks so far, {len(new)} violations here")
    metrics = {"runs": per_run, "max_decode_prefill_delta_nats": worst,
               "decode_prefill": [{"case": r.case.name, "first_divergence": f, "max_delta": d}
                                  for r, f, d, _ in consistency]}
    return StageResult.judged("generate", failures, evidence, metrics)
