"""json_text.loads: the reader of every file a user or a crash can damage."""

from __future__ import annotations

import json

import pytest

from pytest_specdec import json_text


def test_ordinary_integers_are_read_without_the_python_hook(monkeypatch):
    # a journal line holds thousands of token ids: a Python call for each halves the decoding
    calls = []

    def counting(digits: str):
        calls.append(digits)
        return int(digits)

    monkeypatch.setattr(json_text, "parse_int", counting)
    assert json_text.loads(b'{"ids": [1, 2, 3], "n": 40}') == {"ids": [1, 2, 3], "n": 40}
    assert calls == []


def test_an_integer_past_the_digit_limit_still_reads_as_infinity():
    assert json_text.loads("[1, " + "9" * 5000 + "]") == [1, float("inf")]


def test_an_object_hooks_refusal_and_bad_text_raise_as_before():
    with pytest.raises(json_text.RepeatedKey):
        json_text.loads('{"a": 1, "a": 2}', object_pairs_hook=json_text.unique_keys)
    with pytest.raises(json.JSONDecodeError):
        json_text.loads("[1, 2")
    with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
        json_text.loads("[" * 100000)


def test_an_integer_too_long_for_a_float_reads_as_infinity():
    # each reader's finite-number check then refuses it with a message, not an OverflowError
    assert json_text.loads('{"v": ' + "9" * 400 + "}") == {"v": float("inf")}
