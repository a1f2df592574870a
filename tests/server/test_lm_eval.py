"""lm-eval's `local-completions` runs a loglikelihood (multiple-choice) task against the live
server end to end: a custom task over a local jsonl (no downloads), scored through `echo` +
`logprobs` on prompt tokens. The check that the numbers are right: lm-eval's per-choice
loglikelihoods equal the server's own prompt logprobs summed over the continuation."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from mxserve import default_model_path
from tests.server.live import API_KEY, MODEL_NAME

ITEMS = [
    {"context": "In the beginning God created the", "choices": [" heaven", " sheep", " river"], "label": 0},
    {"context": "And God said, Let there be", "choices": [" light", " bread", " gold"], "label": 0},
    {"context": "The LORD is my", "choices": [" shepherd", " table", " window"], "label": 0},
    {"context": "Blessed are the", "choices": [" meek", " stones", " wheels"], "label": 0},
]


@pytest.fixture()
def task_dir(tmp_path):
    data = tmp_path / "kjv_cloze.jsonl"
    data.write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    (tmp_path / "kjv_cloze.yaml").write_text(textwrap.dedent(f"""\
        task: kjv_cloze
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        test_split: test
        output_type: multiple_choice
        doc_to_text: "{{{{context}}}}"
        doc_to_choice: "{{{{choices}}}}"
        doc_to_target: label
        target_delimiter: ""
        metric_list:
          - metric: acc
    """))
    return tmp_path


def test_lm_eval_local_completions_loglikelihood(live, task_dir, monkeypatch, client):
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args={"model": MODEL_NAME, "base_url": live.api_url + "/completions", "tokenizer_backend": "huggingface",
                    "tokenizer": str(default_model_path()), "num_concurrent": 4, "max_retries": 1, "timeout": 120},
        tasks=["kjv_cloze"], task_manager=TaskManager(include_path=str(task_dir)), log_samples=True,
    )
    acc = results["results"]["kjv_cloze"]["acc,none"]
    assert 0 <= acc <= 1
    samples = results["samples"]["kjv_cloze"]
    assert len(samples) == len(ITEMS)
    # lm-eval's loglikelihood of each choice equals what the server says the prompt logprobs are
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    sample = samples[0]
    item = ITEMS[sample["doc_id"]]
    for choice, resp in zip(item["choices"], sample["resps"], strict=True):
        loglikelihood = float((resp[0] if len(resp) == 1 else resp)[0])  # [(loglikelihood, is_greedy)]
        context_ids = tokenizer(item["context"], add_special_tokens=False).input_ids
        full_ids = tokenizer(item["context"] + choice, add_special_tokens=False).input_ids
        out = client.post("/v1/completions", json={"prompt": full_ids, "max_tokens": 0, "echo": True,
                                                   "logprobs": 0}).json()
        expected = sum(out["choices"][0]["logprobs"]["token_logprobs"][len(context_ids):])
        assert math.isclose(loglikelihood, expected, rel_tol=1e-9, abs_tol=1e-9)
