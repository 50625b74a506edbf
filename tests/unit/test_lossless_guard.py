"""lossless: exactness modes and the divergence a configuration's outputs show against a reference."""

from __future__ import annotations

import pytest

from pytest_specdec.lossless import Exactness, Outputs, compare, counterpart, parse_exactness

REFERENCE = Outputs(((1, 2, 3, 4, 5, 6, 7, 8), (9, 9, 9)), ("abcdefgh", "zzz"))


@pytest.mark.parametrize("text, mode", [("exact", Exactness("exact")), ("OFF", Exactness("off")),
                                        ("prefix:16", Exactness("prefix", 16))])
def test_modes(text, mode):
    assert parse_exactness(text) == mode and str(mode) == text.lower()


@pytest.mark.parametrize("text", ["nearly", "prefix:", "prefix:0", "prefix:-3", "prefix:x"])
def test_bad_modes_name_the_accepted_forms(text):
    with pytest.raises(ValueError, match='use "exact", "prefix:N", "off"'):
        parse_exactness(text)


@pytest.mark.parametrize("text, meant", [("exat", "exact"), ("Of", "off"), ("prefx:32", "prefix:32"),
                                         ("prefix", "prefix:N")])
def test_a_misspelt_mode_is_named(text, meant):
    with pytest.raises(ValueError, match=f'^{text!r} is not a losslessness mode; did you mean "{meant}"\\?$'):
        parse_exactness(text)


@pytest.mark.parametrize("text", ["prefix:", "prefix:0", "prefix:-3", "prefix:x", "prefix:1.5"])
def test_a_bad_prefix_length_says_what_n_must_be(text):
    with pytest.raises(ValueError, match="a whole number 1 or more"):
        parse_exactness(text)


def test_identical_outputs_are_lossless():
    assert compare("ddtree-tp1-b8", REFERENCE, "ar-tp1", REFERENCE, Exactness("exact")) is None


def test_the_first_divergence_is_reported_with_both_continuations():
    got = Outputs(((1, 2, 3, 40, 50, 60, 70, 80), (9, 9, 8)), ("abcXYZW!", "zzy"))
    divergence = compare("ddtree-tp1-b8", got, "ar-tp1", REFERENCE, Exactness("exact"))
    assert (divergence.prompt, divergence.position, divergence.unit) == (0, 3, "token")
    assert divergence.message() == (
        "ddtree-tp1-b8 is not lossless: prompt 1 differs from ar-tp1 at token 4 (2 of 2 prompts "
        "differ); ar-tp1 continues [4, 5, 6, 7, 8], ddtree-tp1-b8 continues [40, 50, 60, 70, 80]")


def test_a_prefix_tolerates_what_comes_after_it():
    late = Outputs(((1, 2, 3, 4, 5, 6, 0, 0), (9, 9, 9)), ("", ""))
    assert compare("x", late, "ar-tp1", REFERENCE, Exactness("prefix", 6)) is None
    assert compare("x", late, "ar-tp1", REFERENCE, Exactness("prefix", 7)).position == 6
    assert compare("x", late, "ar-tp1", REFERENCE, Exactness("off")) is None


def test_a_shorter_output_diverges_where_it_ends():
    short = Outputs(((1, 2, 3), (9, 9, 9)), ("abc", "zzz"))
    divergence = compare("x", short, "ar-tp1", REFERENCE, Exactness("exact"))
    assert divergence.position == 3 and list(divergence.got) == []


def test_outputs_of_another_number_of_prompts_fail_naming_both_counts():
    """zip stopped at the shorter list: the reference's second prompt went unchecked."""
    fewer = Outputs(((1, 2, 3, 4, 5, 6, 7, 8),), ("abcdefgh",))
    for outputs, expected, counts in ((fewer, REFERENCE, "1 prompts, ar-tp1 of 2"),
                                      (REFERENCE, fewer, "2 prompts, ar-tp1 of 1")):
        divergence = compare("ddtree-tp1-b8", outputs, "ar-tp1", expected, Exactness("prefix", 4))
        assert divergence.message() == (f"ddtree-tp1-b8 cannot be checked for losslessness: it has "
                                        f"outputs of {counts}; run the same prompts in both")


def test_without_token_ids_the_text_is_compared():
    reference = Outputs((None,), ("the capital city",))
    divergence = compare("dflash-tp1", Outputs((None,), ("the capitol city",)), "ar-tp1", reference,
                         Exactness("exact"))
    assert (divergence.unit, divergence.position) == ("character", 9)
    assert "ar-tp1 continues 'al cit'..., dflash-tp1 continues 'ol cit'..." in divergence.message()


def test_outputs_round_trip_through_json():
    outputs = Outputs(((1, 2), None), ("ab", "cd"))
    assert Outputs.from_json(outputs.to_json()) == outputs and Outputs.from_json(None) is None


@pytest.mark.parametrize("nodeid, config, shared", [
    ("t.py::test_generation[ddtree-tp1-b8-chat]", "ddtree-tp1-b8", "t.py::test_generation[chat]"),
    ("t.py::test_generation[ar-tp1-chat]", "ar-tp1", "t.py::test_generation[chat]"),
    ("t.py::test_generation[chat-blackwell-ar-tp4]", "blackwell-ar-tp4", "t.py::test_generation[chat]"),
    ("t.py::test_short[ar-tp1]", "ar-tp1", "t.py::test_short[]"),
    ("t.py::test_x[ddtree-tp1-b8-chat-2-3]", "ddtree-tp1-b8", "t.py::test_x[chat-2-3]"),
])
def test_a_configuration_is_compared_within_its_test(nodeid, config, shared):
    assert counterpart(nodeid, config) == shared


def test_outputs_of_prompts_cut_to_other_lengths_cannot_be_checked():
    """A workload with truncate = true cuts a prompt to each server's context length: outputs of two
    different prompts were called a lossless failure (or, matching by chance, a pass)."""
    reference = Outputs(((1, 2, 3), (4, 5, 6)), ("", ""), (40, 900))
    for tokens in (((1, 2, 3), (4, 5, 6)), ((1, 2, 3), (7, 8, 9))):  # equal outputs prove nothing either
        cut = Outputs(tokens, ("", ""), (40, 500))
        divergence = compare("ddtree-tp1-b8", cut, "ar-tp1", reference, Exactness("exact"))
        assert divergence is not None and divergence.message() == (
            "ddtree-tp1-b8 cannot be checked for losslessness: its prompt 2 was 500 tokens long, ar-tp1's "
            "900, so they continued different prompts (a workload with truncate = true cuts each prompt to "
            "its server's context length); give both servers the same context length")


def test_prompt_sizes_a_server_did_not_send_are_not_held_against_the_outputs():
    same = Outputs(((1, 2, 3), (4, 5, 6)), ("", ""), (40, 900))
    for sizes in ((40, None), None):  # a server that sends none; a record of an earlier release
        unknown = Outputs(same.tokens, same.texts, sizes)
        assert compare("x", unknown, "ar-tp1", same, Exactness("exact")) is None
        assert compare("x", same, "ar-tp1", unknown, Exactness("exact")) is None
    lossy = Outputs(((1, 2, 3), (4, 5, 0)), ("", ""), (40, None))
    assert compare("x", lossy, "ar-tp1", same, Exactness("exact")).position == 2


def test_prompt_sizes_round_trip_through_json_and_older_records_have_none():
    outputs = Outputs(((1, 2), None), ("ab", "cd"), (7, None))
    assert Outputs.from_json(outputs.to_json()) == outputs
    older = {"tokens": [[1, 2]], "texts": ["ab"]}
    assert Outputs.from_json(older).prompt_tokens is None and "prompt_tokens" not in Outputs.from_json(older).to_json()


def _divergence(margin: float):
    reference = Outputs(((1, 2, 3, 4),), ("abcd",), margins=((5.0, 3.2, margin, 1.0),))
    return compare("ddtree-tp1-b8", Outputs(((1, 2, 9, 4),), ("abzd",)), "ar-tp1", reference, Exactness("exact"))


def test_a_divergence_at_a_near_tie_says_so_and_still_fails():
    """The reference's top two tokens nearly tied where the outputs part: the verdict stands,
    and the message says numerical nondeterminism can flip such a choice."""
    divergence = _divergence(0.0004)
    assert divergence is not None and divergence.message() == (
        "ddtree-tp1-b8 is not lossless: prompt 1 differs from ar-tp1 at token 3; ar-tp1 continues [3, 4], "
        "ddtree-tp1-b8 continues [9, 4]; ar-tp1's top two tokens at token 3 differ by 0.0004 in "
        "log-probability (near-tie, under 0.1: numerical nondeterminism (batch size, kernel choice) can flip it, "
        "so this divergence alone does not show a lossy method)")


def test_a_divergence_at_a_clear_choice_says_it_is_no_near_tie():
    assert _divergence(2.3).message().endswith(
        "; ar-tp1's top two tokens at token 3 differ by 2.3 in log-probability (a clear choice, 0.1 or more: "
        "not a near-tie)")


def test_without_the_references_margins_the_message_is_as_before():
    divergence = compare("ddtree-tp1-b8", Outputs(((1, 2, 9, 4),), ("abzd",)), "ar-tp1",
                         Outputs(((1, 2, 3, 4),), ("abcd",)), Exactness("exact"))
    assert divergence is not None and divergence.message().endswith("ddtree-tp1-b8 continues [9, 4]")


def test_margins_round_trip_through_json_and_older_records_have_none():
    outputs = Outputs(((1, 2),), ("ab",), margins=((0.25, 1.5),))
    assert Outputs.from_json(outputs.to_json()) == outputs
    assert "margins" not in Outputs(((1, 2),), ("ab",)).to_json()
    assert Outputs.from_json({"tokens": [[1, 2]], "texts": ["ab"]}).margin(0, 0) is None


@pytest.mark.parametrize("method, lossless, backend, margins, asked", [
    ("ar", "exact", "sglang", True, 2), ("ar", "prefix:32", "sglang", False, 0), ("ddtree", "exact", "sglang", True, 0),
    ("ar", "off", "sglang", True, 0), ("ar", "exact", "embedded", True, 2), ("dflash", "exact", "embedded", True, 0),
    ("dflash", "exact", "sglang", True, 2), ("ar", "prefix:32", "attach", True, 0)])
def test_only_the_reference_asks_for_top_logprobs_with_the_switch_where_its_backend_serves_them(
        method, lossless, backend, margins, asked):
    """The reference's margins cost its requests a top-2 logprob each, which changes its own
    figures: asked only under --specdec-lossless-margins (never by default, SGLang's prefix:32
    included), where a check reads them, and only of a server that serves them for the reference's
    method: SGLang, the embedded engine on ar (it refuses them on a speculative method), not an
    attached server (which may refuse them)."""
    from pytest_specdec.configuration import MatrixCase
    from pytest_specdec.lossless import reference_top_logprobs

    state = _state(lossless, backend, margins, reference=method if method == "dflash" else "ar")
    assert reference_top_logprobs(MatrixCase("f", method, 1, None), state) == asked


def _state(lossless: str, backend: str, margins: bool, reference: str = "ar"):
    from types import SimpleNamespace

    from pytest_specdec.backends import AttachBackend, EmbeddedBackend, SGLangBackend

    kinds = {"sglang": SGLangBackend, "embedded": EmbeddedBackend, "attach": AttachBackend}
    return SimpleNamespace(lossless=parse_exactness(lossless), backend=kinds[backend],
                           settings=SimpleNamespace(reference=reference, lossless_margins=margins))


@pytest.mark.parametrize("backend, margins, switch", [
    ("sglang", False, "--specdec-lossless-margins"), ("sglang", True, None), ("embedded", False, None),
    ("attach", False, None)])
def test_the_switch_is_named_where_the_backend_serves_margins_the_run_did_not_ask(backend, margins, switch):
    from pytest_specdec.lossless import margins_switch

    assert margins_switch(_state("exact", backend, margins)) == switch


def test_a_divergence_without_margins_names_the_switch_that_would_tell_a_near_tie():
    divergence = compare("ddtree-tp1-b8", Outputs(((1, 2, 9, 4),), ("abzd",)), "ar-tp1",
                         Outputs(((1, 2, 3, 4),), ("abcd",)), Exactness("exact"), "--specdec-lossless-margins")
    assert divergence is not None and divergence.message().endswith(
        "ddtree-tp1-b8 continues [9, 4]; rerun with --specdec-lossless-margins to see whether ar-tp1's choice at "
        "token 3 was a near-tie (off by default: it perturbs ar-tp1's own figures)")


def test_the_switch_is_not_named_where_the_margin_is_known_or_texts_are_compared():
    """A margin at hand is said instead; a text compared by characters has no token to ask about."""
    reference = Outputs(((1, 2, 3, 4),), ("abcd",), margins=((5.0, 3.2, 2.3, 1.0),))
    known = compare("ddtree-tp1-b8", Outputs(((1, 2, 9, 4),), ("abzd",)), "ar-tp1", reference, Exactness("exact"),
                    "--specdec-lossless-margins")
    assert known is not None and "rerun" not in known.message() and "a clear choice" in known.message()
    texts = compare("ddtree-tp1-b8", Outputs((None,), ("abzd",)), "ar-tp1", Outputs((None,), ("abcd",)),
                    Exactness("exact"), "--specdec-lossless-margins")
    assert texts is not None and texts.unit == "character" and "rerun" not in texts.message()


def _journaled(outputs: Outputs) -> Outputs:
    """`outputs` read back as a late verdict, a resume or a merge reads them: through JSON as the
    journal writes it (finite numbers only)."""
    import json

    return Outputs.from_json(json.loads(json.dumps(outputs.to_json(), allow_nan=False)))


@pytest.mark.parametrize("margin, kind", [(0.0999996, "near-tie"), (0.1, "a clear choice"), (0.00001, "near-tie"),
                                          (2.3, "a clear choice")])
def test_a_margin_read_back_from_the_journal_is_on_the_same_side_of_the_near_tie(margin, kind):
    """Records keep margins to 5 decimals, but a near-tie just under 0.1 must not round up to a
    clear choice: the test that measured it and every path reading it back say the same."""
    reference = Outputs(((1, 2, 3, 4),), ("abcd",), margins=((5.0, 3.2, margin, 1.0),))
    got = Outputs(((1, 2, 9, 4),), ("abzd",))
    messages = [compare("ddtree-tp1-b8", got, "ar-tp1", ref, Exactness("exact")).message()
                for ref in (reference, _journaled(reference))]
    assert all(f"in log-probability ({kind}" in message for message in messages), messages
    assert messages[0] == messages[1]


def test_a_second_choice_of_no_finite_log_probability_costs_only_its_own_margin():
    """SGLang (orjson) sends a -inf log-probability as null, a json server as -Infinity: that
    token's margin is unknown, its request keeps the others', and the journal (finite numbers
    only) takes them; a divergence at a kept one still names it after the round trip."""
    import json

    from pytest_specdec.client import _margins

    body = json.loads('{"output_top_logprobs": [[[-0.1, 5, "a"], [null, 6, "b"]], [[-0.2, 7, "c"], '
                      '[-Infinity, 8, "d"]], [[-0.5, 1, "e"], [-0.52, 2, "f"]]]}')
    margins = _margins(body)
    assert margins is not None and margins[:2] == (None, None) and margins[2] == pytest.approx(0.02)
    reference = Outputs(((5, 7, 1),), ("ace",), margins=(margins,))
    read = _journaled(reference)
    assert read.margin(0, 0) is None and read.margin(0, 2) == pytest.approx(0.02)
    message = compare("ddtree-tp1-b8", Outputs(((5, 7, 2),), ("acf",)), "ar-tp1", read, Exactness("exact")).message()
    assert "differ by 0.02 in log-probability (near-tie" in message


def test_a_longer_output_diverges_where_the_references_ends_even_with_its_margins():
    """A configuration that keeps generating past the reference's end (it missed the stop token)
    is not lossless; the reference's margins cover its own tokens only, so the divergent position
    past them has no margin, which must not stop the comparison."""
    reference = Outputs(((1, 2, 3),), ("abc",), margins=((5.0, 3.2, 2.3),))
    divergence = compare("x", Outputs(((1, 2, 3, 4, 5),), ("abcde",)), "ar-tp1", reference, Exactness("exact"))
    assert divergence is not None and (divergence.position, list(divergence.expected), list(divergence.got)) == \
        (3, [], [4, 5])
    assert divergence.margin is None


def test_token_ids_from_one_side_only_compare_the_texts():
    """One server sent token ids, the other none (an attached server, an earlier release's
    record): the texts are compared, and said to be, as where neither sent them."""
    reference = Outputs(((1, 2, 3),), ("the capital",))
    for got in (Outputs((None,), ("the capitol",)), Outputs((None,), ("the capital",))):
        for outputs, expected in ((got, reference), (reference, got)):
            divergence = compare("x", outputs, "ar-tp1", expected, Exactness("exact"))
            assert (divergence is None) == (got.texts == reference.texts)
            assert divergence is None or (divergence.unit, divergence.position) == ("character", 9)
