"""workloads: the dataclass, built-in sets, the JSONL loader and the context-length guard."""

from __future__ import annotations

import json
import re

import pytest

from pytest_specdec import context_rule
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.lossless import Exactness, Outputs, compare
from pytest_specdec.workloads import (
    BUILTIN_WORKLOADS,
    ContextLengthError,
    Prompt,
    Workload,
    builtin_workload,
    embedded_token_count,
    fit_to_context,
    load_jsonl,
    load_workload,
)


def wl(*texts: str, **fields) -> Workload:
    return Workload(name="t", prompts=tuple(Prompt(t) for t in texts), **fields)


# ------------------------------------------------------------------ dataclass


def test_sampling_params_are_sglang_keys_with_prompt_override():
    w = Workload(name="w", prompts=(Prompt("a"), Prompt("b", max_new_tokens=7)), max_new_tokens=32,
                 temperature=0.0, extra_sampling={"top_k": 1})
    assert w.sampling_params(0) == {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True, "top_k": 1}
    assert w.sampling_params(1)["max_new_tokens"] == 7
    assert w.extra_sampling == (("top_k", 1),)
    hash(w)  # frozen and hashable: usable as a parametrize value and a dict key


def test_plain_strings_become_prompts_and_greedy_flag():
    w = Workload(name="w", prompts=("hello", "world"), temperature=0.7)  # type: ignore[arg-type]
    assert w.prompts == (Prompt("hello"), Prompt("world"))
    assert not w.greedy
    assert wl("x").greedy


@pytest.mark.parametrize("temperature, extra, greedy", [
    (0.0, (), True), (5e-7, (), True), (1e-6, (), False), (0.7, (), False),
    (0.7, (("top_k", 1),), True), (0.7, (("top_k", 2),), False), (0.7, (("top_k", -1),), False),
])
def test_greedy_is_sglangs_rule_a_temperature_below_its_epsilon_or_top_k_1(temperature, extra, greedy):
    """SGLang decodes these greedily; the flag read temperature == 0 alone, so the guard left
    them unchecked as sampled."""
    assert Workload(name="w", prompts=("a",), temperature=temperature, extra_sampling=extra).greedy is greedy


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
        ({"max_new_tokens": 1.5}, "max_new_tokens must be a positive integer"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
        ({"concurrency": True}, "concurrency must be a positive integer"),
        ({"temperature": -0.1}, "temperature must be a number >= 0"),
        ({"temperature": float("nan")}, "temperature must be a number >= 0"),
        ({"extra_sampling": {"max_new_tokens": 3}}, "as workload fields"),
    ],
)
def test_invalid_fields_raise_usage_errors(fields, match):
    with pytest.raises(SpecdecUsageError, match=match):
        wl("x", **fields)


def test_empty_workloads_rejected():
    with pytest.raises(SpecdecUsageError, match="has no prompts"):
        Workload(name="w", prompts=())
    with pytest.raises(SpecdecUsageError, match="non-empty name"):
        Workload(name="", prompts=(Prompt("x"),))


def test_resized_cycles_prompts():
    w = wl("a", "b", "c").resized(7)
    assert [p.text for p in w.prompts] == ["a", "b", "c", "a", "b", "c", "a"]
    assert [p.text for p in wl("a", "b", "c").resized(2).prompts] == ["a", "b"]
    with pytest.raises(SpecdecUsageError):
        wl("a").resized(0)


def test_to_dict_is_json_and_counts_prompts():
    d = wl("a", "b", concurrency=4).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["num_prompts"] == 2 and d["concurrency"] == 4


# ------------------------------------------------------------------ built-in sets


@pytest.mark.parametrize("name", BUILTIN_WORKLOADS)
def test_builtin_sets_have_a_few_dozen_short_distinct_prompts(name):
    w = builtin_workload(name)
    assert w.name == name
    assert 24 <= len(w.prompts) <= 64
    texts = [p.text for p in w.prompts]
    assert len(set(texts)) == len(texts)
    assert all(0 < embedded_token_count(t) < 400 for t in texts)  # the embedded engine tokenises bytes
    assert w.max_new_tokens >= 64 and w.greedy and w.ignore_eos


def test_builtin_sets_differ_and_accept_overrides():
    chat, code = builtin_workload("chat"), builtin_workload("code", concurrency=8, max_new_tokens=16)
    assert set(chat.prompts).isdisjoint(code.prompts)
    assert code.concurrency == 8 and code.max_new_tokens == 16


def test_unknown_builtin_names_the_choices():
    with pytest.raises(SpecdecUsageError, match="chat, code, math"):
        builtin_workload("poetry")


# ------------------------------------------------------------------ JSONL loader


def write(tmp_path, text: str, name="mine.jsonl"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_jsonl_reads_prompts_overrides_and_skips_blank_lines(tmp_path):
    path = write(tmp_path, '{"prompt": "one"}\n\n{"prompt": "two", "max_new_tokens": 9}\n')
    w = load_jsonl(path, concurrency=2)
    assert w.name == "mine"
    assert w.prompts == (Prompt("one"), Prompt("two", 9))
    assert w.concurrency == 2
    assert load_jsonl(path, name="other").name == "other"


@pytest.mark.parametrize(
    "content, line, match",
    [
        ('{"prompt": "ok"}\n{"prompt": "bad",\n', 2, "not valid JSON"),
        ('["prompt"]\n', 1, "expected a JSON object, got an array;"),
        ('null\n', 1, "expected a JSON object, got null;"),
        ('{"prompt": "ok"}\n{"prompt": "x", "max_tokens": 5}\n', 2, r"unknown key\(s\) \['max_tokens'\]"),
        ('{"text": "x"}\n', 1, "unknown key"),
        ('{"prompt": ""}\n', 1, '"prompt" must be a non-empty string'),
        ('{"prompt": 3}\n', 1, '"prompt" must be a non-empty string'),
        ('{"prompt": "x", "max_new_tokens": 0}\n', 1, '"max_new_tokens" must be a positive integer'),
        ('{"prompt": "x", "max_new_tokens": "8"}\n', 1, '"max_new_tokens" must be a positive integer'),
        # the value as the JSON file spells it, not as Python prints it (True)
        ('{"prompt": "x", "max_new_tokens": true}\n', 1, '"max_new_tokens" must be a positive integer, got true$'),
        ('{"prompt": "x", "max_new_tokens": "8"}\n', 1, '"max_new_tokens" must be a positive integer, got "8"$'),
        # nesting past the decoder's recursion limit, digits past Python's limit on an int
        ('{"prompt": "ok"}\n' + "[" * 100_000 + "]" * 100_000 + "\n", 2, "not valid JSON"),
        ('{"prompt": "x", "max_new_tokens": ' + "9" * 5000 + '}\n', 1,
         '"max_new_tokens" must be a positive integer'),
        # JSON keeps a repeated key's last value without a word: another prompt or budget than meant
        ('{"prompt": "ok"}\n{"prompt": "a", "prompt": "b"}\n', 2,
         r'"prompt" is given twice in one object, and JSON keeps only the last; keep the one you mean$'),
        ('{"prompt": "x", "max_new_tokens": 8, "max_new_tokens": 800}\n', 1, '"max_new_tokens" is given twice'),
        ('{"prompt": "ok"}\n{"prompt": "a\\ud800b"}\n', 2,
         r"\"prompt\" holds '\\ud800' at character 2, a lone surrogate .*; fix the \\u escape"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path, content, line, match):
    path = write(tmp_path, content)
    with pytest.raises(SpecdecUsageError, match=match) as info:
        load_jsonl(path)
    assert f"{path}:{line}:" in str(info.value)


@pytest.mark.parametrize("char, name, escape", [
    ("\t", "tab (U+0009)", "\\t"), ("\0", "NUL (U+0000)", "\\u0000"), ("\r", "carriage return (U+000D)", "\\r"),
    ("\x1b", "control character (U+001B)", "\\u001b"),
])
def test_a_raw_control_character_in_a_prompt_names_it_and_its_escape(tmp_path, char, name, escape):
    """A tab typed into a hand-written prompt read "not valid JSON (Invalid control character at
    at column 14)": the decoder's message ends in "at", and it named neither the character nor
    the escape to write instead."""
    path = write(tmp_path, '{"prompt": "ok"}\n{"prompt": "a' + char + 'b"}\n')
    with pytest.raises(SpecdecUsageError) as info:
        load_jsonl(path)
    assert str(info.value) == (f"{path}:2: not valid JSON at column 14: a raw {name} inside a string, which "
                               f"JSON does not allow: write it as {escape}")


def test_a_decoder_message_that_ends_in_at_is_not_followed_by_a_second_at(tmp_path):
    """ "Unterminated string starting at" is the decoder's, completed by its position: put before
    ours, it read "starting at at column 12"."""
    with pytest.raises(SpecdecUsageError) as info:
        load_jsonl(write(tmp_path, '{"prompt": "ab\n'))
    assert "(Unterminated string starting at column 12); each line must be" in str(info.value)
    assert " at at " not in str(info.value)


def test_empty_or_missing_files(tmp_path):
    with pytest.raises(SpecdecUsageError, match="no prompts found"):
        load_jsonl(write(tmp_path, "\n  \n"))
    with pytest.raises(SpecdecUsageError, match="does not exist"):
        load_jsonl(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("target, said", [
    ("gone.jsonl", "is a broken symbolic link to gone.jsonl, where nothing is"),
    ("link.jsonl", "is a symbolic link loop (it points to link.jsonl, and following the links never reaches a file)"),
])
def test_a_prompt_file_that_is_a_broken_link_names_the_link_and_where_it_points(tmp_path, target, said):
    """A dangling link said "does not exist", a loop "cannot be read (Too many levels of symbolic
    links); fix its permissions or the path": neither named the link nor where it points."""
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    for load in (load_jsonl, load_workload):
        with pytest.raises(SpecdecUsageError) as info:
            load(str(link))
        assert str(info.value) == (f"workload file {link} leads to no file: {link} {said}; repoint or remove the "
                                   f"link, or fix the path")


@pytest.mark.parametrize("encoding, line, byte", [("latin-1", 2, "0xe9"), ("utf-16", 1, "0xff")])
def test_a_prompt_file_not_in_utf8_names_its_line_and_the_fix(tmp_path, encoding, line, byte):
    """It said "cannot be read: 'utf-8' codec can't decode byte 0xe9 in position 30: invalid
    continuation byte": no line, no fix."""
    bad = tmp_path / "other.jsonl"
    bad.write_bytes('{"prompt": "tea"}\n{"prompt": "café"}\n'.encode(encoding))
    with pytest.raises(SpecdecUsageError) as info:
        load_jsonl(bad)
    assert str(info.value) == f"{bad}:{line}: not UTF-8 (byte {byte}); save the file as UTF-8"


def test_prompts_holding_unicode_line_separators_stay_whole(tmp_path):
    """JSON takes U+2028, U+2029 and U+0085 unescaped in a string (json.dumps with
    ensure_ascii=False writes them so); the loader split lines where str.splitlines does, so
    such a prompt was "not valid JSON (Unterminated string ...)"."""
    prompts = ["first\u2028second", "para\u2029graph", "next\x85line", "crlf"]
    path = tmp_path / "text.jsonl"
    path.write_bytes("\r\n".join(json.dumps({"prompt": p}, ensure_ascii=False) for p in prompts).encode())
    assert [p.text for p in load_jsonl(path).prompts] == prompts


def test_a_prompt_file_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    """Editors that save UTF-8 with a BOM made line 1 "not valid JSON (Unexpected UTF-8 BOM (decode
    using utf-8-sig))", a fix for the plugin's code, not for the user."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes('{"prompt": "café"}\n'.encode("utf-8-sig"))
    assert load_jsonl(path).prompts == (Prompt("café"),)


def test_load_workload_resolves_builtin_or_relative_path(tmp_path):
    assert load_workload("math").name == "math"
    write(tmp_path, '{"prompt": "p"}\n', name="set.jsonl")
    assert load_workload("set.jsonl", base_dir=tmp_path).prompts == (Prompt("p"),)
    with pytest.raises(SpecdecUsageError, match=r"neither a built-in \(chat, code, math\) nor an existing .jsonl file$"):
        load_workload("poetry")
    with pytest.raises(SpecdecUsageError, match="nor an existing .jsonl file; did you mean the built-in 'chat'\\?"):
        load_workload("Chta")
    with pytest.raises(SpecdecUsageError, match="does not exist"):
        load_workload("missing.jsonl", base_dir=tmp_path)


@pytest.mark.parametrize("content, problem", [
    ('{"prompt": "ok"}\n{"prompt": 3}\n', 'prompts/set.jsonl:2: "prompt" must be a non-empty string'),
    ("\n", "prompts/set.jsonl: no prompts found"),
    (None, "workload file prompts/set.jsonl does not exist"),
])
def test_a_configured_prompt_file_is_named_relative_to_the_project(tmp_path, content, problem):
    """Its errors named the file by absolute path, where the config's errors name theirs
    relative to the project root (`specdec.toml: line 2 ...`)."""
    (tmp_path / "prompts").mkdir()
    if content is not None:
        write(tmp_path / "prompts", content, name="set.jsonl")
    with pytest.raises(SpecdecUsageError) as info:
        load_workload("prompts/set.jsonl", base_dir=tmp_path)
    assert str(info.value).startswith(problem)
    assert str(tmp_path) not in str(info.value)


# ------------------------------------------------------------------ context-length guard


def test_fit_to_context_passes_fitting_workload_unchanged():
    w = wl("abcd", max_new_tokens=4)
    assert fit_to_context(w, 12) is w  # BOS + 4 bytes + 4 new tokens = 9 <= 12 - 2, and 5 <= 12 - 7


def test_fit_to_context_names_index_and_sizes():
    w = Workload(name="chat", prompts=(Prompt("ok"), Prompt("x" * 50), Prompt("y" * 60)), max_new_tokens=20)
    with pytest.raises(ContextLengthError) as info:
        fit_to_context(w, 64)
    err = info.value
    assert (err.index, err.prompt_tokens, err.max_new_tokens, err.context_length) == (1, 51, 20, 64)
    assert "workload 'chat', prompt 2: 51 prompt tokens + 20 max_new_tokens = 71, but the server (context " \
        "length 64) serves a request in full only up to 62 tokens, with a prompt of at most 57" in str(err)
    assert isinstance(err, SpecdecUsageError)


def test_a_prompt_is_numbered_as_its_line_in_every_message(tmp_path):
    """One convention, from 1: the prompt a context-length error names is the line a
    malformed-file error would name, and a divergence's prompt and token count the same way."""
    lines = ['{"prompt": "ok"}', '{"prompt": "fine"}', json.dumps({"prompt": "z" * 60})]
    with pytest.raises(ContextLengthError, match="workload 'mine', prompt 3: 61 prompt tokens"):
        fit_to_context(load_jsonl(write(tmp_path, "\n".join(lines) + "\n"), max_new_tokens=8), 64)
    with pytest.raises(SpecdecUsageError, match=r"mine\.jsonl:3: "):
        load_jsonl(write(tmp_path, "\n".join(lines[:2] + ['{"prompt": 3}']) + "\n"))
    with pytest.raises(SpecdecUsageError, match="prompt 1 max_new_tokens must be a positive integer"):
        Workload(name="w", prompts=(Prompt("a", 0),))
    reference = Outputs(((1, 2, 3), (4, 5, 6)), ("", ""))
    got = Outputs(((1, 2, 3), (4, 9, 6)), ("", ""))
    divergence = compare("ddtree-tp1-b8", got, "ar-tp1", reference, Exactness("exact"))
    assert (divergence.prompt, divergence.position) == (1, 1)  # indices, from 0
    assert "prompt 2 differs from ar-tp1 at token 2;" in divergence.message()


def test_fit_to_context_uses_per_prompt_budget_and_counter():
    w = Workload(name="w", prompts=(Prompt("aaaa", max_new_tokens=100),), max_new_tokens=1)
    with pytest.raises(ContextLengthError, match="100 max_new_tokens"):
        fit_to_context(w, 64)
    words = lambda text: len(text.split())  # noqa: E731 - a word-level stand-in tokenizer
    assert fit_to_context(wl("a b c", max_new_tokens=5), 10, words).prompts[0].text == "a b c"
    with pytest.raises(ContextLengthError, match="3 prompt tokens"):  # 3 + 6 passes 10 - 2
        fit_to_context(wl("a b c", max_new_tokens=6), 10, words)


def test_fit_to_context_truncates_when_configured():
    w = Workload(name="w", prompts=(Prompt("short"), Prompt("é" * 40, max_new_tokens=10)), max_new_tokens=10)
    fitted = fit_to_context(w, 30, truncate=True)
    assert fitted.prompts[0] is w.prompts[0]
    cut = fitted.prompts[1]
    assert cut.max_new_tokens == 10
    # up to 30 - 2 with 10 new tokens: BOS + 16 bytes (two per 'é'), the longest that fits
    assert embedded_token_count(cut.text) == 17 and cut.text == "é" * 8
    assert w.prompts[1].text.startswith(cut.text)


class ListCounter:
    """A counter that counts a list at once, as a server's /v1/tokenize does; `calls` its lists."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, text: str) -> int:
        return self.count_many([text])[0]

    def count_many(self, texts):
        self.calls.append(list(texts))
        return [embedded_token_count(t) for t in texts]


@pytest.mark.parametrize("text", ["x" * 5000, "é" * 777, "ab€" * 301 + "z", "word " * 2000])
@pytest.mark.parametrize("context", [30, 100, 1000])
def test_a_list_counter_cuts_where_one_text_at_a_time_does(text, context):
    """The 16-ary search a list counter gets finds the binary search's prefix, in a workload's
    one call plus one call a round."""
    w = wl(text, max_new_tokens=10)
    counter = ListCounter()
    assert fit_to_context(w, context, counter, truncate=True) == fit_to_context(w, context, truncate=True)
    assert counter.calls[0] == [text] and len(counter.calls) <= 5
    assert all(1 <= len(call) <= 16 for call in counter.calls)


def test_a_context_length_error_names_the_settings_that_fix_it():
    """It ended "or enable truncation", which names no setting (the workload key is `truncate`),
    and said so where no cut prompt could fit. Now it names the key and the context length that
    fits, and offers truncation only where a cut prompt fits."""
    with pytest.raises(ContextLengthError) as info:
        fit_to_context(wl("x" * 50, max_new_tokens=20), 64)
    assert str(info.value).endswith(
        "shorten the prompt, lower max_new_tokens, raise the server's --context-length to at least 73 (in "
        "extra_args of [tool.specdec.engine] or [tool.specdec.sglang]), or set truncate = true in the "
        "workload's [[tool.specdec.workloads]] entry to cut its prompts to fit")
    for truncate in (False, True):
        with pytest.raises(ContextLengthError) as info:
            fit_to_context(wl("abc", max_new_tokens=64), 64, truncate=truncate)
        assert "truncate" not in str(info.value)
        assert "lower max_new_tokens (64 of them leave no room for a prompt in a context of 64)" in str(info.value)


@pytest.mark.parametrize("context", [8, 64, 4096])
def test_the_guard_passes_exactly_what_sglang_serves_in_full(context):
    """SGLang's tokenizer manager allows prompt + max_new_tokens up to the context length, but its
    scheduler then serves at most context - 1 tokens a request, cutting max_new_tokens to
    context - 2 - prompt, and refuses a prompt of context - 6 tokens or more. The guard let through
    a total of context - 1 (served one token short) and a prompt up to context - 2 (refused); now
    it passes a request exactly when both stages serve it as asked."""
    words = lambda text: len(text.split())  # noqa: E731 - a word-level stand-in tokenizer

    def passes(prompt_tokens: int, max_new_tokens: int) -> bool:
        try:
            fit_to_context(wl("w " * prompt_tokens, max_new_tokens=max_new_tokens), context, words)
        except ContextLengthError:
            return False
        return True

    longest = context - 7  # the longest prompt the scheduler takes
    assert passes(longest, 5) and not passes(longest + 1, 1) and not passes(longest + 1, 4)
    assert passes(1, context - 3) and not passes(1, context - 2)  # the total's limit is context - 2
    short = max(1, longest // 2)
    assert passes(short, context - 2 - short) and not passes(short, context - 1 - short)
    for prompt_tokens in range(max(1, context - 40), context + 2):  # every case near the limits
        for max_new_tokens in range(1, 45):
            served = context_rule.new_tokens_served(prompt_tokens, max_new_tokens, context)
            refused = prompt_tokens >= context_rule.max_req_input_len(context) or \
                prompt_tokens + max_new_tokens > context
            assert passes(prompt_tokens, max_new_tokens) == (not refused and served == max_new_tokens)


def test_the_fix_named_is_the_context_that_fits():
    """The context length a ContextLengthError asks for serves that request in full, one less does not."""
    for prompt_tokens, max_new_tokens in ((51, 20), (60, 1), (3, 1)):
        with pytest.raises(ContextLengthError, match="at least (\\d+)") as info:
            fit_to_context(wl("x" * (prompt_tokens - 1), max_new_tokens=max_new_tokens), prompt_tokens)
        needed = int(re.search(r"at least (\d+)", str(info.value)).group(1))
        assert context_rule.fits(prompt_tokens, max_new_tokens, needed)
        assert not context_rule.fits(prompt_tokens, max_new_tokens, needed - 1)
        fit_to_context(wl("x" * (prompt_tokens - 1), max_new_tokens=max_new_tokens), needed)


def test_truncation_impossible_when_budget_fills_context():
    with pytest.raises(ContextLengthError):
        fit_to_context(wl("abc", max_new_tokens=64), 64, truncate=True)
    with pytest.raises(SpecdecUsageError, match="context_length must be a positive integer"):
        fit_to_context(wl("abc"), 0)


@pytest.mark.parametrize("field, words", [
    ("warmup_requests", "'warmup_requests' is not a Workload field; a workload built in code takes the run-wide "
                        "warm-up: set --specdec-warmup-requests (ini specdec_warmup_requests, [tool.specdec] "
                        "warmup_requests), or give the workload a [[tool.specdec.workloads]] entry with its own "
                        "warmup_requests"),
    ("concurency", "'concurency' is not a Workload field; did you mean 'concurrency'?"),
    ("name", "'name' is not a Workload field; name the built workload with .replace(name=...)"),
])
def test_a_keyword_no_workload_takes_is_one_line_not_a_type_error(tmp_path, field, words):
    """load_workload("chat", warmup_requests=2), a [[tool.specdec.workloads]] key, raised the
    dataclass's bare TypeError about Workload.__init__."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    for spec in ("chat", str(path)) if field != "name" else ("chat",):  # a file's name is load_jsonl's keyword
        with pytest.raises(SpecdecUsageError) as info:
            load_workload(spec, **{field: 2})
        assert str(info.value) == words
