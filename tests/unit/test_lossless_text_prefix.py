"""prefix:N on outputs without token ids: N tokens of text, as a tokenizer counts them, or a
message that says only N characters were compared -- never N characters passed off as N tokens."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_specdec import recording
from pytest_specdec.lossless import Exactness, Outputs, blind, compare, uncounted
from pytest_specdec.text_spans import counter_spans, token_spans

WORDS = "alpha beta gamma delta epsilon zeta eta theta"


def word_count(text: str) -> int:
    """A tokenizer of one token a word (a space starts the next), plus one BOS as /tokenize adds."""
    return 1 + len(text.replace(" ", "  ").split())


def test_token_spans_cut_each_text_after_its_first_n_tokens():
    texts = [WORDS, "one two", "", "one two six"]
    spans = token_spans(texts, 3, lambda ts: [word_count(t) for t in ts])
    # shorter texts are whole, and so is one of exactly N tokens (its count less the BOS)
    assert spans == (len("alpha beta gamma "), len("one two"), 0, len("one two six"))


def test_a_counted_prefix_compares_n_tokens_of_text_not_n_characters():
    late = WORDS.replace("delta", "DELTA")  # differs in token 4, past 3 characters and 3 tokens
    spans3 = token_spans([WORDS], 3, lambda ts: [word_count(t) for t in ts])
    spans4 = token_spans([WORDS], 4, lambda ts: [word_count(t) for t in ts])
    got = Outputs((None,), (late,))
    assert compare("x", got, "ar-tp1", Outputs((None,), (WORDS,), spans=(3, spans3)), Exactness("prefix", 3)) is None
    found = compare("x", got, "ar-tp1", Outputs((None,), (WORDS,), spans=(4, spans4)), Exactness("prefix", 4))
    assert found is not None and found.unit == "character" and found.position == WORDS.index("delta")
    assert "the first 4 tokens are its first 23 characters" in found.message()


def test_an_uncounted_prefix_says_it_compared_characters():
    late = WORDS[:20] + "X" + WORDS[21:]  # character 21: inside 8 tokens, past 8 characters
    reference = Outputs((None,), (WORDS,))
    assert uncounted(Outputs((None,), (late,)), reference, Exactness("prefix", 8)) == 1
    assert uncounted(Outputs(((1,),), ("a",)), Outputs(((1,),), ("a",)), Exactness("prefix", 8)) == 0
    bad = compare("x", Outputs((None,), ("alpha bX",)), "ar-tp1", reference, Exactness("prefix", 8))
    assert bad is not None and "only the first 8 characters were compared, not 8 tokens" in bad.message()


def test_the_configurations_own_count_cuts_where_the_reference_has_none():
    """A reference without spans (a record of an earlier release, or a server that counted none)
    is cut where the configuration's server counted its own text's first N tokens."""
    early = WORDS.replace("gamma", "GAMMA")  # differs in token 3, past 3 characters
    got = Outputs((None,), (early,), spans=(3, token_spans([early], 3, lambda ts: [word_count(t) for t in ts])))
    reference = Outputs((None,), (WORDS,))
    found = compare("x", got, "ar-tp1", reference, Exactness("prefix", 3))
    assert found is not None and found.position == WORDS.index("gamma")
    assert "the first 3 tokens are its first 17 characters" in found.message()
    assert uncounted(got, reference, Exactness("prefix", 3)) == 0


def test_token_ids_of_one_side_only_leave_a_prefix_uncounted():
    """ids on one side are no ids to compare: the texts are, on N characters where nothing counted them."""
    assert uncounted(Outputs(((1, 2),), (WORDS,)), Outputs((None,), (WORDS,)), Exactness("prefix", 8)) == 1
    assert uncounted(Outputs((None,), (WORDS,)), Outputs(((1, 2),), (WORDS,)), Exactness("prefix", 8)) == 1


def test_spans_counted_for_another_n_are_not_used():
    spans = token_spans([WORDS], 3, lambda ts: [word_count(t) for t in ts])
    reference = Outputs((None,), (WORDS,), spans=(3, spans))
    assert uncounted(Outputs((None,), (WORDS,)), reference, Exactness("prefix", 3)) == 0
    assert uncounted(Outputs((None,), (WORDS,)), reference, Exactness("prefix", 5)) == 1


def test_spans_round_trip_through_json_and_older_records_have_none():
    outputs = Outputs((None, (1, 2)), ("ab", "c"), (4, 4), (32, (2, None)))
    assert Outputs.from_json(outputs.to_json()) == outputs
    assert Outputs.from_json({"tokens": [None], "texts": ["ab"]}).spans is None


class FallbackCounter:
    """A server counter that fell back to a stand-in count (no /v1/tokenize)."""
    served = False

    def count_many(self, texts):
        return [len(t.encode()) for t in texts]

    def __call__(self, text):
        return self.count_many([text])[0]


def test_a_stand_in_count_is_no_token_count():
    assert counter_spans([WORDS], 3, FallbackCounter()) is None
    assert counter_spans([WORDS], 3, None) is None
    assert counter_spans([WORDS], 3, word_count) == (3, (len("alpha beta gamma "),))


@pytest.mark.parametrize("mode, ids, expected", [
    ("prefix:3", None, (3, (len("alpha beta gamma "),))),
    ("prefix:3", (5, 6), None),  # ids sent: nothing to count
    ("exact", None, None),
])
def test_the_recorder_counts_spans_of_outputs_without_ids(monkeypatch, mode, ids, expected):
    from pytest_specdec.lossless import parse_exactness
    from pytest_specdec.state import STATE_KEY

    state = SimpleNamespace(lossless=parse_exactness(mode))
    item = SimpleNamespace(config=SimpleNamespace(stash={STATE_KEY: state}))
    rec = recording.Recorder.__new__(recording.Recorder)
    rec.item = item
    records = [SimpleNamespace(output_ids=ids, text=WORDS)]
    assert rec._spans(SimpleNamespace(token_counter=word_count), records) == expected


def test_matching_texts_that_hold_u_fffd_are_counted_as_unseen():
    """Every byte that completes no character decodes to U+FFFD: two different such tokens read
    alike, so a text comparison passes them unseen; token ids, or texts without it, see all."""
    text = "ab\ufffdcd"
    assert blind(Outputs((None,), (text,)), Outputs((None,), (text,)), Exactness("exact")) == 1
    assert blind(Outputs(((1,),), (text,)), Outputs(((2,),), (text,)), Exactness("exact")) == 0  # ids compared
    assert blind(Outputs((None,), ("abcd",)), Outputs((None,), ("abcd",)), Exactness("exact")) == 0
    assert blind(Outputs((None,), (text,)), Outputs((None,), ("ab?cd",)), Exactness("exact")) == 0  # a red
    assert blind(Outputs((None,), ("ab?cd",)), Outputs((None,), (text,)), Exactness("exact")) == 0  # a red too
    assert blind(Outputs((None,), (text,)), Outputs(((1,),), (text,)), Exactness("exact")) == 1  # ids of one side
    assert blind(Outputs((None,), (text,)), Outputs((None,), (text,)), Exactness("prefix", 2)) == 0  # past the cut
    assert blind(Outputs((None,), (text,)), Outputs((None,), (text,)), Exactness("off")) == 0
