"""`mxserve run`: streams an answer, prints a summary line, errors are one line with exit code 2."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mxserve import default_model_path
from mxserve.testing import TINY_CONFIGS, random_checkpoint

MXSERVE = [sys.executable, "-m", "mxserve.cli.main"]


@pytest.fixture(scope="module")
def chat_checkpoint(tmp_path_factory) -> Path:
    """tiny-all with the packaged tokenizer's vocabulary, and that tokenizer."""
    path = tmp_path_factory.mktemp("tiny-chat")
    tokenizer_dir = default_model_path()
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    config = dataclasses.replace(TINY_CONFIGS["tiny-all"], vocab_size=max(vocab.values()) + 1 + 16)
    random_checkpoint(config, path, seed=0, progress=False)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, path / name)
    return path


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*MXSERVE, "run", *args], capture_output=True, text=True, input=stdin, timeout=300)


def test_run_streams_a_reply_and_a_summary(chat_checkpoint):
    result = run("--model", str(chat_checkpoint), "--max-tokens", "6", "In the beginning")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "no text streamed to stdout"
    assert "6 tokens" in result.stderr and "tok/s" in result.stderr and "TTFT" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_reads_a_piped_prompt_and_is_deterministic_when_greedy(chat_checkpoint):
    first = run("--model", str(chat_checkpoint), "--max-tokens", "5", "--mode", "complete", stdin="And God said")
    second = run("--model", str(chat_checkpoint), "--max-tokens", "5", "--mode", "complete", stdin="And God said")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout and first.stdout.strip()
    assert "completion mode" in first.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/dir", "hi"], "does not exist"),
        (["--temperature", "-1", "hi"], "temperature"),
        (["--max-tokens", "0", "hi"], "max_tokens"),
        (["--kv-cache-dtype", "int3", "hi"], "kv_cache_dtype"),
    ],
)
def test_run_bad_input_is_one_line_and_exit_2(chat_checkpoint, args, message):
    if args[0] != "--model":
        args = ["--model", str(chat_checkpoint), *args]
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1


def test_run_without_a_tokenizer_says_so(tmp_path):
    random_checkpoint("tiny-all", tmp_path, seed=0, progress=False)
    result = run("--model", str(tmp_path), "hi")
    assert result.returncode == 2 and "tokenizer" in result.stderr
