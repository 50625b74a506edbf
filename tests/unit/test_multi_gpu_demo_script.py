"""scripts/multi_gpu_demo.py on a host it cannot run on: a sentence, not a traceback, and no
output folder left behind; `--help` prints what it does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "multi_gpu_demo.py"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "OUT": str(tmp_path / "out"), "PATH": str(tmp_path / "bin")}  # no nvidia-smi
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=environ, timeout=120)


def test_help_prints_the_demo_and_runs_nothing(tmp_path):
    done = _run(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "Two TP1 configurations" in done.stdout and not (tmp_path / "out").exists()


def test_a_host_without_nvidia_smi_is_told_what_the_demo_needs(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "at least two NVIDIA GPUs" in done.stderr and not (tmp_path / "out").exists()
