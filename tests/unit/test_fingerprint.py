"""Fingerprints: a digest that changes exactly when what a test measures changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_specdec.configuration import MatrixCase
from pytest_specdec.fingerprint import Fingerprint, fingerprint, text_digest
from pytest_specdec.fingerprint import measured_setup
from pytest_specdec.state import build

CASE = MatrixCase("cpu", "ddtree", 1, 8)


def test_digest_is_stable_and_order_free():
    a = fingerprint({"workload": {"n": 8, "c": 1}, "model": None})
    b = fingerprint({"model": None, "workload": {"c": 1, "n": 8}})
    assert a.digest == b.digest and len(a.digest) == 16
    assert fingerprint({"workload": {"n": 9, "c": 1}, "model": None}).digest != a.digest


def test_changed_parts_name_what_differs():
    now = fingerprint({"workload": {"n": 8}, "server": ["--budget", "8"]})
    assert now.changed_parts({"workload": {"n": 4}, "server": ["--budget", "8"]}) == ["workload"]
    assert now.changed_parts(None) == ["server", "workload"]


@pytest.mark.parametrize("damaged", [float("nan"), float("inf"), {"n": float("-inf")}])
def test_parts_read_back_with_nan_or_infinity_are_named_as_changed(damaged):
    """Parts come back from baseline files, journals, shard manifests and --benchmark-compare
    files, whose JSON reads NaN and Infinity; comparing one raised ValueError ("Out of range float
    values are not JSON compliant") from the message that names what changed."""
    now = fingerprint({"workload": {"n": 8}, "server": ["--budget", "8"]})
    old = Fingerprint.from_json({"digest": "0" * 16, "parts": {"workload": damaged,
                                                               "server": ["--budget", "8"]}})
    assert now.changed_parts(old.parts) == ["workload"]
    assert now.what_changed(old, "unknown") == "workload"


def test_a_fingerprint_of_an_older_version_says_so(monkeypatch):
    """Equal parts under another fingerprint VERSION: the message said the record or entry did
    not record which part changed, though it did record them all, unchanged."""
    from pytest_specdec import fingerprint as fingerprint_mod

    old = fingerprint({"workload": {"n": 8}, "model": None})
    monkeypatch.setattr(fingerprint_mod, "VERSION", fingerprint_mod.VERSION + 1)
    now = fingerprint({"workload": {"n": 8}, "model": None})
    assert now.digest != old.digest
    assert now.what_changed(old, "unknown") == fingerprint_mod.OLDER_VERSION
    assert "older fingerprint version" in fingerprint_mod.OLDER_VERSION
    assert now.what_changed(Fingerprint(old.digest, {}), "unknown") == "unknown"  # parts not kept
    assert now.what_changed(None, "unknown") == "unknown"


def test_text_digest_separates_texts():
    assert text_digest(["ab", "c"]) != text_digest(["a", "bc"])


def _state(root: Path, toml: str):
    (root / "pyproject.toml").write_text(toml)
    return build(root, {}, {})


BASE = """
[tool.specdec]
backend = "embedded"
[tool.specdec.matrix.cpu]
methods = ["ddtree"]
budget = [8]
[[tool.specdec.workloads]]
name = "mine"
prompts = "prompts.jsonl"
num_prompts = 2
max_new_tokens = 16
[tool.specdec.engine]
draft_agreement = 0.9
"""


@pytest.mark.parametrize("change, part", [
    (lambda toml, prompts: (toml.replace("max_new_tokens = 16", "max_new_tokens = 17"), prompts),
     "workload"),
    (lambda toml, prompts: (toml.replace("num_prompts = 2", "num_prompts = 3"), prompts),
     "workload"),
    (lambda toml, prompts: (toml, prompts.replace("one", "uno")), "workload"),
    (lambda toml, prompts: (toml.replace("draft_agreement = 0.9", "draft_agreement = 0.8"),
                            prompts), "server"),
    (lambda toml, prompts: (toml.replace("draft_agreement = 0.9", "draft_agreement = 0.9\nmodel_preset = \"tiny-hybrid\""),
                            prompts), "model"),
])
def test_each_part_of_the_setup_changes_the_fingerprint(tmp_path, change, part):
    prompts = '{"prompt": "one"}\n{"prompt": "two"}\n'
    (tmp_path / "prompts.jsonl").write_text(prompts)
    before = measured_setup(CASE, "mine", _state(tmp_path, BASE))
    again = measured_setup(CASE, "mine", _state(tmp_path, BASE))
    assert again.digest == before.digest
    toml, new_prompts = change(BASE, prompts)
    (tmp_path / "prompts.jsonl").write_text(new_prompts)
    after = measured_setup(CASE, "mine", _state(tmp_path, toml))
    assert after.digest != before.digest
    assert part in after.changed_parts(before.parts)


def test_the_configuration_is_part_of_it(tmp_path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "one"}\n')
    state = _state(tmp_path, BASE)
    b8 = measured_setup(CASE, "mine", state)
    b16 = measured_setup(MatrixCase("cpu", "ddtree", 1, 16), "mine", state)
    assert b8.changed_parts(b16.parts) == ["configuration", "server"]


def test_the_embedded_engine_ignores_the_model_ids_it_does_not_serve(tmp_path):
    """It serves its preset: a baseline saved before model was set warned 'its model differs', and
    --specdec-resume measured again, though the same preset served."""
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "one"}\n')
    before = measured_setup(CASE, "mine", _state(tmp_path, BASE))
    named = BASE.replace('backend = "embedded"', 'backend = "embedded"\nmodel = "Qwen/NoSuch-1B"\n'
                                                 'draft_model = "org/NoSuch-draft"')
    after = measured_setup(CASE, "mine", _state(tmp_path, named))
    assert after.digest == before.digest and after.matches(before.digest)
    assert after.parts["model"] == {"preset": "tiny"}


def test_on_sglang_the_model_ids_are_the_model(tmp_path):
    from pytest_specdec.backends import SGLangBackend

    (tmp_path / "prompts.jsonl").write_text('{"prompt": "one"}\n')
    sglang = SGLangBackend("test")
    one = replace(_state(tmp_path, BASE.replace('backend = "embedded"', 'model = "org/a"')), backend=sglang)
    other = replace(_state(tmp_path, BASE.replace('backend = "embedded"', 'model = "org/b"')), backend=sglang)
    a, b = measured_setup(CASE, "mine", one), measured_setup(CASE, "mine", other)
    assert not a.matches(b.digest) and "model" in a.changed_parts(b.parts)
    assert a.parts["model"] == {"model": "org/a", "draft_model": None} and a.former == ()


def _written_before(case, workload, state):
    """The fingerprint as it was written before the model part said what the backend serves:
    the configured ids, on every backend."""
    from pytest_specdec.fingerprint import fingerprint as digest_of

    parts = dict(measured_setup(case, workload, state).parts)
    parts["model"] = {"model": state.config.model, "draft_model": state.config.draft_model}
    return digest_of(parts)


@pytest.mark.parametrize("model", ['', 'model = "Qwen/Qwen3.6-27B"\n'])
def test_entries_written_before_the_served_model_part_still_match(tmp_path, model):
    """Baseline files and journals of earlier releases keep matching the same setup, written
    with or without model ids; survives a JSON round trip (pytest-benchmark's saved runs)."""
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "one"}\n')
    state = _state(tmp_path, BASE.replace('backend = "embedded"', f'backend = "embedded"\n{model}'))
    old = _written_before(CASE, "mine", state)
    now = measured_setup(CASE, "mine", state)
    assert now.matches(old.digest)
    assert Fingerprint.from_json(now.to_json()).matches(old.digest)
    other_workload = _written_before(CASE, None, state)
    assert not now.matches(other_workload.digest)


def test_the_projects_own_cpu_baselines_stay_matched():
    """baselines/cpu.json was saved with the model ids of the project's [tool.specdec]."""
    import json

    root = Path(__file__).resolve().parents[2]
    entries = json.loads((root / "baselines" / "cpu.json").read_text())["entries"]
    state = build(root, {"backend": "embedded"}, {})
    digests = {e["fingerprint"] for e in entries["test_generation[ar-tp1-chat]"].values()}
    assert len(digests) == 1
    assert measured_setup(MatrixCase("cpu", "ar", 1, None), "chat", state).matches(digests.pop())
