"""Real clients against the engine, as users run them: the `openai` package on the OpenAI-compatible
endpoints, SGLang's own frontend (`sgl.gen`) on /generate, SGLang's bench_serving request coroutines
at their defaults on the three routes it benchmarks (sglang_bench.py), and the exported tokenizer
read by Hugging Face's `tokenizers` (what transformers' fast tokenizers, and so bench_serving, run on).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from pytest_specdec.engine.openai_api import render_chat
from pytest_specdec.engine.tokenizer import ByteTokenizer
from sglang_bench import import_bench_serving, run_bench_serving

openai = pytest.importorskip("openai", reason="the openai package is a test dependency: pip install -e '.[test]'")

PROMPT = "The capital city of France is"
CONTEXT = 512


@pytest.fixture(scope="module")
def engine(module_engines):
    return module_engines("--method", "ddtree", "--budget", "8", "--context-length", str(CONTEXT))


@pytest.fixture(scope="module")
def client(engine):
    return openai.OpenAI(base_url=engine.url + "/v1", api_key="unused", max_retries=0)


def model_name(client) -> str:
    return client.models.list().data[0].id


def test_openai_models(client, engine):
    name = model_name(client)
    card = client.models.retrieve(name)
    assert (card.id, card.owned_by) == (name, "sglang") and card.model_extra["max_model_len"] == CONTEXT
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_openai_completion_matches_generate(client, engine):
    native = engine.generate(PROMPT, max_new_tokens=24)
    out = client.completions.create(model=model_name(client), prompt=PROMPT, max_tokens=24, temperature=0)
    assert out.choices[0].text == native["text"]
    assert out.choices[0].finish_reason == "length"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (native["meta_info"]["prompt_tokens"], 24)
    assert out.usage.prompt_tokens_details is None and out.usage.model_extra == {"reasoning_tokens": 0}  # SGLang's


def test_openai_completion_stream(client, engine):
    native = engine.generate(PROMPT, max_new_tokens=40)
    chunks = list(client.completions.create(model=model_name(client), prompt=PROMPT, max_tokens=40, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert len(chunks) > 3
    assert "".join(c.choices[0].text for c in chunks if c.choices) == native["text"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 40


def test_openai_chat(client, engine):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    native = engine.generate(render_chat(messages), max_new_tokens=20)
    out = client.chat.completions.create(model=model_name(client), messages=messages, max_tokens=20, temperature=0)
    message = out.choices[0].message
    assert (message.role, message.content) == ("assistant", native["text"])
    assert out.usage.prompt_tokens == len(ByteTokenizer().encode(render_chat(messages)))


def test_openai_chat_stream(client, engine):
    messages = [{"role": "user", "content": [{"type": "text", "text": "Count to five."}]}]
    native = engine.generate(render_chat([{"role": "user", "content": "Count to five."}]), max_new_tokens=30)
    chunks = list(client.chat.completions.create(model=model_name(client), messages=messages, max_tokens=30,
                                                 stream=True))
    role, *content, finish = chunks  # as SGLang streams a chat: the role alone, the text, the finish alone
    assert (role.choices[0].delta.role, role.choices[0].delta.content) == ("assistant", "")
    assert all(c.choices[0].delta.role is None and c.choices[0].finish_reason is None for c in content)
    assert "".join(c.choices[0].delta.content for c in content) == native["text"]
    assert (finish.choices[0].delta.content, finish.choices[0].finish_reason) == (None, "length")


@pytest.mark.parametrize("include_usage", [True, False], ids=["and-final-usage", "alone"])
def test_openai_continuous_usage_stats(client, include_usage):
    """SGLang puts the usage so far on every completion chunk and on each chat chunk with content;
    include_usage, read apart, adds the final usage chunk. The engine ignored the option."""
    options = {"include_usage": include_usage, "continuous_usage_stats": True}
    completion = list(client.completions.create(model=model_name(client), prompt=PROMPT, max_tokens=40,
                                                stream=True, stream_options=options))
    messages = [{"role": "user", "content": "Count to five."}]
    chat = list(client.chat.completions.create(model=model_name(client), messages=messages, max_tokens=30,
                                               stream=True, stream_options=options))
    for chunks, prompt, content, most in (
            (completion, len(ByteTokenizer().encode(PROMPT)), lambda c: True, 40),
            (chat, len(ByteTokenizer().encode(render_chat(messages))), lambda c: bool(c.choices[0].delta.content), 30)):
        streamed = [c for c in chunks if c.choices]
        assert all((c.usage is not None) == content(c) for c in streamed)
        usages = [c.usage for c in streamed if c.usage is not None]
        assert usages and all((u.prompt_tokens, u.total_tokens) == (prompt, prompt + u.completion_tokens)
                              for u in usages)
        counts = [u.completion_tokens for u in usages]
        assert counts == sorted(counts) and counts[-1] <= most
        assert [c.usage.completion_tokens for c in chunks if not c.choices] == ([most] if include_usage else [])
    finish = [c for c in completion if c.choices][-1]
    assert (finish.choices[0].finish_reason, finish.usage.completion_tokens) == ("length", 40)


def test_openai_client_sees_what_the_engine_cannot_honour(client):
    with pytest.raises(openai.BadRequestError, match="n=2"):
        client.completions.create(model=model_name(client), prompt=PROMPT, max_tokens=4, n=2)
    with pytest.raises(openai.BadRequestError, match="top_p=0.5"):
        client.chat.completions.create(model=model_name(client), messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=4, top_p=0.5)
    with pytest.raises(openai.BadRequestError, match="context length"):
        client.completions.create(model=model_name(client), prompt="a" * CONTEXT, max_tokens=4)


@pytest.fixture(scope="module")
def sgl(sglang_reference):
    """SGLang's frontend language; `import sglang` stays light (no torch, no transformers)."""
    return importlib.import_module("sglang")


def test_sglang_frontend_gen(sgl, engine):
    native = engine.generate(PROMPT, max_new_tokens=16)

    @sgl.function
    def complete(s, prompt):
        s += prompt
        s += sgl.gen("answer", max_tokens=16, temperature=0)

    backend = sgl.RuntimeEndpoint(engine.url)
    state = complete.run(prompt=PROMPT, backend=backend)
    assert state["answer"] == native["text"]
    assert state.get_meta_info("answer")["completion_tokens"] == 16
    stream = complete.run(prompt=PROMPT, backend=backend, stream=True)
    assert "".join(stream.text_iter("answer")) == native["text"]


@pytest.fixture(scope="module")
def bench_serving(sglang_reference):
    """SGLang's `sglang.benchmark.serving`, imported without its tokenizer and dataset packages."""
    return import_bench_serving()


BENCH_OUTPUT = 16


BENCH_RUNS = {"sglang": ("sglang", []), "sglang-token-ids": ("sglang", ["--tokenize-prompt"]),
              "sglang-oai": ("sglang-oai", []), "sglang-oai-chat": ("sglang-oai-chat", []),
              **{f"{backend}-cache-report": (backend, ["--cache-report"])
                 for backend in ("sglang", "sglang-oai", "sglang-oai-chat")}}


@pytest.mark.parametrize("backend, flags", list(BENCH_RUNS.values()), ids=list(BENCH_RUNS))
def test_what_bench_serving_sends_is_served(bench_serving, engine, monkeypatch, backend, flags):
    """Each backend users point bench_serving at, with its own defaults (streamed, greedy,
    ignore_eos, its extra fields), sends what SGLang's source builds today: the engine must serve
    it in full, and bench_serving must read back the text and token counts the engine produced."""
    prompt_ids = ByteTokenizer().encode(PROMPT)
    prompt = prompt_ids if "--tokenize-prompt" in flags else PROMPT
    run = run_bench_serving(bench_serving, monkeypatch, ["--backend", backend, "--base-url", engine.url, *flags],
                            [(prompt, len(prompt_ids), BENCH_OUTPUT)])
    (payload,), (output,) = run.payloads, run.outputs
    assert payload["stream"] is True, payload  # bench_serving streams unless --disable-stream
    assert output.success and not output.error, (payload, output.error)
    chat = backend == "sglang-oai-chat"
    native = engine.generate(render_chat([{"role": "user", "content": PROMPT}]) if chat else PROMPT, BENCH_OUTPUT)
    assert output.generated_text == native["text"], payload
    # every event's text read back (a slow reader may get one: the engine, as SGLang, skips to the latest state)
    assert output.output_len == BENCH_OUTPUT and output.ttft > 0, payload
    if backend == "sglang":  # the only route whose stream reports the prompt's length unasked
        assert output.prompt_len == native["meta_info"]["prompt_tokens"]
    if "--cache-report" in flags:  # no prefix is kept: SGLang reports 0 cached tokens and no breakdown
        assert (output.cached_tokens, output.cached_tokens_details) == (0, None)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The directory `python -m pytest_specdec.engine.export_tokenizer DIR` writes."""
    target = tmp_path_factory.mktemp("tokenizer") / "specdec-tiny"
    subprocess.run([sys.executable, "-m", "pytest_specdec.engine.export_tokenizer", str(target),
                    "--context-length", str(CONTEXT)], check=True, capture_output=True)
    return target


TEXTS = [PROMPT, "  two leading spaces,\ttabs\nand lines", "héllo wörld 😀 日本語", "x" * 300]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_exported_tokenizer_counts_and_decodes_as_the_engine(tokenizer_dir, engine, text):
    tokenizers = pytest.importorskip("tokenizers", reason="a test dependency: pip install -e '.[test]'")
    tok = tokenizers.Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    ids = tok.encode(text).ids
    assert ids == ByteTokenizer().encode(text)
    assert tok.decode(ids, skip_special_tokens=True) == text
    by_ids = engine.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 4}}).json()
    assert by_ids["meta_info"]["prompt_tokens"] == len(ids) == engine.generate(text, 4)["meta_info"]["prompt_tokens"]


def test_exported_tokenizer_config(tokenizer_dir):
    import json

    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["model_max_length"]) == ("<s>", "</s>", CONTEXT)
    assert config["chat_template"] and config["split_special_tokens"] is True


def test_bench_serving_without_tokenizer_loads_what_the_engine_reports(bench_serving, engine, monkeypatch):
    """Without --tokenizer, bench_serving loads the tokenizer /model_info names through SGLang's own
    get_tokenizer: a name that is no local directory goes to the Hub (here unreachable), where the
    engine's served name was never one. The engine reports the directory it wrote its tokenizer
    into, and what loads from it counts as the engine does."""
    pytest.importorskip("transformers", reason="bench_serving's tokenizer loader runs on it: pip install -e '.[test]'")
    reported = engine.get("/model_info").json()
    run = run_bench_serving(bench_serving, monkeypatch, ["--backend", "sglang", "--base-url", engine.url],
                            [(PROMPT, len(ByteTokenizer().encode(PROMPT)), BENCH_OUTPUT)],
                            load_tokenizer=bench_serving.get_tokenizer)
    assert run.tokenizer_id == reported["tokenizer_path"] != reported["model_path"]
    assert reported["model_path"] == model_name(openai.OpenAI(base_url=engine.url + "/v1", api_key="unused"))
    counted = engine.post("/v1/tokenize", {"prompt": TEXTS}).json()["tokens"]
    assert [run.tokenizer.encode(text) for text in TEXTS] == counted
    assert run.tokenizer.model_max_length == CONTEXT
    assert engine.get("/server_info").json()["tokenizer_path"] == reported["tokenizer_path"]
