"""An `mxserve serve` subprocess for the benchmark: started on a free port, stopped with SIGTERM.

The server runs in its own process so that the clients' event loop never competes with the
engine for the interpreter lock. Its output goes to a log file (and is kept for error
messages); the port is read from uvicorn's "running on" line, as the CLI tests do.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class ServerArgs:
    """The `mxserve serve` flags the benchmark sets (others keep their defaults)."""

    model: str | None  # checkpoint directory; None = the packaged default model
    device: str  # "auto", "cpu", "cuda", "cuda:N"
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int  # token budget per engine step
    long_prefill_token_threshold: int  # the chunked-prefill cap: most prompt tokens one request takes per step
    extra: tuple[str, ...] = ()  # more `mxserve serve` arguments, verbatim (e.g. --speculative-config, JSON)

    def argv(self) -> list[str]:
        args = ["--device", self.device, "--max-model-len", str(self.max_model_len),
                "--max-num-seqs", str(self.max_num_seqs),
                "--max-num-batched-tokens", str(self.max_num_batched_tokens),
                "--long-prefill-token-threshold", str(self.long_prefill_token_threshold),
                "--max-pending-requests", str(max(1024, 4 * self.max_num_seqs))]
        return args + (["--model", self.model] if self.model is not None else []) + list(self.extra)


class ServerProcess:
    """`with ServerProcess(args, log_path) as server: server.base_url ...`"""

    def __init__(self, args: ServerArgs, log_path: Path, *, start_timeout_s: float = 600.0) -> None:
        self.args = args
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.base_url = ""
        self._tail: deque[str] = deque(maxlen=40)
        self._port: int | None = None
        self._port_seen = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> ServerProcess:
        argv = [sys.executable, "-m", "mxserve.cli.main", "serve", "--port", "0", *self.args.argv()]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=dict(os.environ))
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self._port_seen.wait(0.2):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._stop()
                why = "exited" if self._proc.returncode is not None else f"did not start in {self.start_timeout_s:.0f} s"
                raise RuntimeError(f"mxserve serve {why} ({' '.join(argv[3:])}); last output:\n" + "".join(self._tail))
        self.base_url = f"http://127.0.0.1:{self._port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop()

    def _read_output(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with self.log_path.open("w") as log:
            for line in self._proc.stdout:
                log.write(line)
                log.flush()
                self._tail.append(line)
                if self._port is None and (match := _RUNNING.search(line)):
                    self._port = int(match.group(1))
                    self._port_seen.set()

    def _stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # graceful: in-flight requests finish, the port is freed
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
