"""The shipped examples are safe to copy as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")  # huggingface_hub (the `models` extra) brings PyYAML

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "github-actions-gpu.yml"


def test_the_gpu_workflow_never_runs_a_fork_pull_request_on_the_self_hosted_runner():
    """A fork's pull request would run its own conftest.py on the GPU runner: the example is
    triggered by pushes to the repository and by hand only, and says why."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"push", "workflow_dispatch"}
    assert any("self-hosted" in job["runs-on"] for job in workflow["jobs"].values())
    assert workflow["permissions"] == {"contents": "read"}
    assert "a fork's pull request would run its own" in WORKFLOW.read_text()
