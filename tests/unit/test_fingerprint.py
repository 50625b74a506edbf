"""Fingerprints: a digest that changes exactly when what a test measures changes."""

from __future__ import annotations

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
    (lambda toml, prompts: (toml.replace('backend = "embedded"',
                                         'backend = "embedded"\nmodel = "org/m"'), prompts),
     "model"),
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
