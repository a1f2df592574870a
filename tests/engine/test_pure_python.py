"""The scheduler side of the engine imports and runs with torch made unimportable."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PURE_MODULES = [
    "mxserve.config.scheduler_config",
    "mxserve.engine.request",
    "mxserve.engine.pool_spec",
    "mxserve.engine.block_manager",
    "mxserve.engine.scheduler_output",
    "mxserve.engine.scheduler",
]


def test_scheduler_modules_import_and_run_without_torch():
    script = textwrap.dedent(
        f"""
        import importlib, sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        for name in {PURE_MODULES!r}:
            importlib.import_module(name)
        from tests.engine.factories import make_request, make_scheduler, run_to_completion
        scheduler = make_scheduler()
        scheduler.add_request(make_request("a", 9, max_tokens=3))
        run_to_completion(scheduler)
        assert scheduler.block_manager.is_all_free()
        assert "torch" not in {{n for n, m in sys.modules.items() if m is not None}}
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
