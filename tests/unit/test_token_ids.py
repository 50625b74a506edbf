"""Outputs hold their token ids as `TokenIds` (one flat array), yet read, compare and travel as
the tuples and JSON lists they were: the journal's records, old ones included, load as before,
and what crosses to the xdist controller is the same JSON text."""

from __future__ import annotations

import json
import pickle

import pytest

from pytest_specdec.lossless import Exactness, Outputs, compare, uncounted
from pytest_specdec.result import Result
from pytest_specdec.token_ids import TokenIds


def test_ids_read_back_as_tuples_with_missing_prompts_as_none():
    ids = TokenIds.of([(5, 6, 7), None, [], (300, 70000)])
    assert list(ids) == [(5, 6, 7), None, (), (300, 70000)]
    assert len(ids) == 4 and ids[0] == (5, 6, 7) and ids[1] is None and ids[-1] == (300, 70000)
    assert ids[1:3] == (None, ())
    assert TokenIds.of([None]) != TokenIds.of([()])  # no ids sent is not an empty output
    assert ids.flat.typecode == "i" and ids.flat.itemsize == 4
    with pytest.raises(IndexError):
        ids[4]


def test_an_id_past_32_bits_widens_the_array_and_keeps_every_id():
    ids = TokenIds.of([(1, 2), (3, 2 ** 40, 4), (5,)])
    assert list(ids) == [(1, 2), (3, 2 ** 40, 4), (5,)] and ids.flat.typecode == "q"


def test_an_id_past_64_bits_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"token id 18446744073709551616 of prompt 2 does not fit in 64 bits"):
        TokenIds.of([(1,), (2, 2 ** 64)])


def test_outputs_convert_what_they_are_given_and_compare_equal_however_built():
    from_tuples = Outputs(((1, 2, 3), None), ("abc", "x"))
    from_lists = Outputs([[1, 2, 3], None], ("abc", "x"))
    assert isinstance(from_tuples.tokens, TokenIds)
    assert from_tuples == from_lists and hash(from_tuples) == hash(from_lists)
    assert from_tuples != Outputs(((1, 2, 4), None), ("abc", "x"))
    assert pickle.loads(pickle.dumps(from_tuples)) == from_tuples


def test_the_journal_json_is_unchanged_and_an_old_record_loads():
    record = {"tokens": [[1, 2, 3], None, [4]], "texts": ["a", "b", "c"]}  # an earlier release's record
    outputs = Outputs.from_json(record)
    assert outputs.to_json() == record
    assert json.dumps(outputs.to_json()) == json.dumps(record)


def test_a_result_crosses_to_the_controller_as_json_text():
    result = Result("t", "n::t", outputs=Outputs(((1, 2), (3,)), ("ab", "c"), (4, 4)))
    carried = json.dumps(result.to_json())  # what attach_to_report puts on the report
    assert Result.from_json(json.loads(carried)).outputs == result.outputs


def test_compare_names_the_first_differing_token_and_counts_prompts():
    reference = Outputs(((1, 2, 3, 4), (5, 6), (7,)), ("", "", ""))
    got = Outputs(((1, 2, 9, 4), (5, 6), (8,)), ("", "", ""))
    divergence = compare("spec", got, "ar", reference, Exactness("exact"))
    assert (divergence.prompt, divergence.position, divergence.prompts_differing) == (0, 2, 2)
    assert "at token 3 (2 of 3 prompts differ)" in divergence.message()  # of all compared, not of those differing
    assert divergence.expected == [3, 4] and divergence.got == [9, 4]
    assert compare("spec", got, "ar", reference, Exactness("prefix", 2)) is not None  # prompt 3's first token
    assert compare("spec", reference, "ar", reference, Exactness("exact")) is None
    assert uncounted(Outputs((None, (5,)), ("ab", "c")), reference, Exactness("prefix", 1)) == 1
