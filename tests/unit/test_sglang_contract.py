"""Contract: every SGLang name the plugin and the embedded engine rely on, checked against SGLang's
own code (0.5.23, from its reference copy: the `sglang_reference` fixture; scripts/setup-venv.sh
installs it into a directory of its own). One test per fact, each failing with the name that moved.

Two parts: the launch argv (below), and the HTTP API, metrics and log lines (further down),
read by importing SGLang's modules where that is light and by parsing their source with `ast`
where an import would pull in transformers, torchvision or CUDA.

The argv: for every entry of the default GPU matrix (methods dflash / ddtree / ar x tp 1, 4, 8 x the ddtree
budgets), `ServerArgs.add_cli_args` must accept our command line and read back the values we meant.

DDTree is not upstream. `--speculative-algorithm` is a free string there (plugins register names),
so `DDTREE` parses as is; the flags differ by preset:
- `num-draft-tokens` (fork): only upstream flags, so it is checked against the unmodified parser;
- `ddtree-budget` (the open pull request): adds `--speculative-ddtree-budget`, which upstream
  rejects. We check it against upstream's parser plus that one flag registered the way the pull
  request declares it (an optional int), and separately assert that upstream alone still rejects
  it -- when upstream merges DDTree that test fails and the extra registration should go.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import functools
import importlib
import json
import re
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_specdec import context_rule, metrics
from pytest_specdec import sglang_api as api
from pytest_specdec.engine import chat_parts, contract, inflight, openai_api, parallel, protocol, server
from pytest_specdec.servers import METHOD_FLAG_PRESETS, ServerSpec
from pytest_specdec.workloads import Prompt, Workload
from pytest_specdec.servers.sglang import build_sglang_argv

# SGLang's own deprecations, met on purpose where the engine is held to its request classes
pytestmark = [pytest.mark.filterwarnings("ignore:'data_parallel_rank' is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:max_tokens is deprecated:DeprecationWarning")]


@pytest.fixture(scope="module")
def server_args(sglang_reference):
    return importlib.import_module("sglang.srt.server_args")


METHODS = ("dflash", "ddtree", "ar")
TPS = (1, 4, 8)
BUDGETS = (8, 12, 15, 16, 32, 64)


def default_matrix():
    for method in METHODS:
        for tp in TPS:
            for budget in BUDGETS if method == "ddtree" else (None,):
                yield ServerSpec(
                    "sglang",
                    method,
                    tp=tp,
                    budget=budget,
                    model="Qwen/Qwen3.6-27B",
                    draft_model=None if method == "ar" else "z-lab/Qwen3.6-27B-DFlash",
                    seed=0,
                )


MATRIX = list(default_matrix())


class _ParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse exits on errors; a test wants the message instead."""

    def error(self, message):
        raise _ParseError(message)


def upstream_parser(server_args) -> argparse.ArgumentParser:
    parser = _Parser(prog="sglang serve")
    server_args.ServerArgs.add_cli_args(parser)
    return parser


@pytest.fixture(scope="module")
def parsers(server_args):
    upstream = upstream_parser(server_args)
    with_pr = upstream_parser(server_args)
    with_pr.add_argument("--speculative-ddtree-budget", type=int, default=None)
    return {"num-draft-tokens": upstream, "ddtree-budget": with_pr}


def parse(parser, argv):
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    return parser.parse_args(argv[3:])


def test_matrix_has_every_entry():
    assert len(MATRIX) == 3 * 2 + 3 * 6  # dflash + ar at 3 TPs, ddtree at 3 TPs x 6 budgets


def test_the_contract_covers_every_gpu_configuration_this_repository_ships():
    """MATRIX is written out here: a method, TP or budget added to the shipped GPU matrices, or
    another model, would run on SGLang with an argv no parser ever checked."""
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    shipped = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["tool"]["specdec"]
    checked = {(s.method, s.tp, s.budget) for s in MATRIX}
    for family, matrix in shipped["matrix"].items():
        if family == "cpu":  # the embedded engine's: no SGLang argv
            continue
        for method in matrix["methods"]:
            for tp in matrix["tp"]:
                for budget in matrix["budget"] if method == "ddtree" else (None,):
                    assert (method, tp, budget) in checked, (family, method, tp, budget)
    assert {s.model for s in MATRIX} == {shipped["model"]}
    assert {s.draft_model for s in MATRIX} - {None} == {shipped["draft_model"]}


@pytest.mark.parametrize("preset", ["ddtree-budget", "num-draft-tokens"])
@pytest.mark.parametrize("spec", MATRIX, ids=lambda s: s.id)
def test_argv_parses_with_sglang_parser(parsers, preset, spec):
    argv = build_sglang_argv(spec, 30011, method_flags=METHOD_FLAG_PRESETS[preset])
    ns = parse(parsers[preset], argv)
    assert ns.model_path == spec.model
    assert ns.tp_size == spec.tp
    assert (ns.host, ns.port, ns.log_level) == ("127.0.0.1", 30011, "info")
    assert ns.random_seed == 0 and ns.enable_metrics is True
    assert ns.speculative_draft_model_path == spec.draft_model
    if spec.method == "ar":
        assert ns.speculative_algorithm is None
    elif spec.method == "dflash":
        assert ns.speculative_algorithm == "DFLASH"
        assert ns.speculative_num_draft_tokens is None  # SGLang's default block (16) applies
    elif preset == "ddtree-budget":
        assert ns.speculative_algorithm == "DDTREE"
        assert ns.speculative_ddtree_budget == spec.budget
    else:
        assert ns.speculative_algorithm == "DDTREE"
        assert ns.speculative_num_draft_tokens == spec.budget + 1  # tree nodes + root


def test_extra_args_cannot_spell_a_flag_the_plugin_sets_another_way(server_args):
    """Every spelling SGLang's parser takes for a flag the plugin sets (an alias, an abbreviation)
    is refused in [tool.specdec.sglang] extra_args, or it would override the test's setting."""
    from pytest_specdec.config import SGLANG_FLAGS_SET_BY_PLUGIN, _flag_set_by_plugin

    for action in upstream_parser(server_args)._actions:
        if set(action.option_strings) & set(SGLANG_FLAGS_SET_BY_PLUGIN):
            for spelling in action.option_strings:
                assert _flag_set_by_plugin(spelling, SGLANG_FLAGS_SET_BY_PLUGIN), spelling


def test_dflash_is_an_upstream_algorithm(sglang_reference):
    spec_info = pytest.importorskip("sglang.srt.speculative.spec_info")
    assert spec_info.SpeculativeAlgorithm.from_string("DFLASH").is_dflash()
    with pytest.raises(ValueError, match="DDTREE"):  # needs the fork's plugin registration
        spec_info.SpeculativeAlgorithm.from_string("DDTREE")


def test_upstream_parser_rejects_the_pull_request_flag(parsers):
    """Documents why the ddtree-budget preset is checked with one registered extra flag."""
    ddtree = next(s for s in MATRIX if s.method == "ddtree")
    argv = build_sglang_argv(ddtree, 1, method_flags=METHOD_FLAG_PRESETS["ddtree-budget"])
    with pytest.raises(_ParseError, match="--speculative-ddtree-budget"):
        parse(parsers["num-draft-tokens"], argv)


def test_a_wrong_flag_would_be_caught(parsers):
    """The contract can fail: an ambiguous or unknown flag is rejected by the real parser."""
    spec = ServerSpec("sglang", "ar", model="m", extra_args=("--cuda-graph-max-bs", "8"))
    with pytest.raises(_ParseError):
        parse(parsers["num-draft-tokens"], build_sglang_argv(spec, 1))


# ---------------------------------------------------------------------------------------------
# The HTTP API, metrics and log lines (pytest_specdec/sglang_api.py), and what the engine accepts
# (pytest_specdec/engine/protocol.py).


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@pytest.fixture(scope="module")
def srt(sglang_reference):
    """Parses a module of SGLang's server (`srt`) by its path under sglang/srt."""
    root = sglang_reference / "sglang" / "srt"
    return lambda relpath: _parse(root / relpath)


@pytest.fixture(scope="module")
def api_types(sglang_reference):
    """SGLang's generated API contract (light: msgspec only), which rejects unknown sampling params."""
    return importlib.import_module("sglang.api.v1.api_types")


def template(node: ast.AST) -> str | None:
    """A string literal's text, an f-string's with `{}` for each value; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def templates(tree: ast.AST) -> list[str]:
    return [t for node in ast.walk(tree) if (t := template(node)) is not None]


def class_fields(tree: ast.Module, name: str) -> dict[str, ast.expr | None]:
    """A dataclass's or pydantic model's annotated fields and their default expressions."""
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)
    assert cls is not None, f"SGLang no longer defines class {name}"
    return {n.target.id: n.value for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def field_default(expr: ast.expr | None):
    """The literal default of a field (`= x` or `= field(default=x)`)."""
    if isinstance(expr, ast.Call) and getattr(expr.func, "id", None) in ("field", "Field"):
        expr = next(k.value for k in expr.keywords if k.arg == "default")
    return ast.literal_eval(expr)


def function(tree: ast.Module, name: str) -> ast.FunctionDef:
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
              None)
    assert fn is not None, f"SGLang no longer defines {name}()"
    return fn


def routes(tree: ast.Module) -> set[str]:
    """Paths of FastAPI routes: `@app.get("/x")`, `@app.api_route("/x", ...)`, ..."""
    return {d.args[0].value for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            for d in n.decorator_list if isinstance(d, ast.Call) and d.args and template(d.args[0]) is not None}


def keys_written(tree: ast.AST, var: str) -> set[str]:
    """String keys stored into the dict named `var`: `var[k] = ...`, `var = {k: ...}`, `var.update({k: ...})`."""
    keys: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == var and template(t.slice):
                    keys.add(t.slice.value)
                if getattr(t, "id", None) == var and isinstance(n.value, ast.Dict):
                    keys |= {k.value for k in n.value.keys if k is not None and template(k)}
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "update"
              and getattr(n.func.value, "id", None) == var and n.args and isinstance(n.args[0], ast.Dict)):
            keys |= {k.value for k in n.args[0].keys if k is not None and template(k)}
    return keys


def dict_keys(tree: ast.AST) -> set[str]:
    return {template(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None and template(k)}


def moved(names, sglang_names, where: str) -> str:
    return f"not in {where} any more: {sorted(set(names) - set(sglang_names))}"


# -- /generate: what the client sends -----------------------------------------------------------

@pytest.mark.parametrize("field", api.REQUEST_FIELDS_SENT)
def test_request_field_sent_is_sglangs(api_types, field):
    assert field in api_types.GenerateRequest.__struct_fields__, moved([field], (), "SGLang's GenerateRequest")


@pytest.mark.parametrize("name", api.SAMPLING_PARAMS_SENT)
def test_sampling_param_sent_is_sglangs(api_types, name):
    assert name in api_types.SamplingParams.__struct_fields__, moved([name], (), "SGLang's SamplingParams")


def test_the_client_sends_exactly_the_names_checked():
    workload = Workload(name="w", prompts=(Prompt("hi"),), max_new_tokens=4, concurrency=1)
    assert tuple(workload.sampling_params(0)) == api.SAMPLING_PARAMS_SENT
    from pytest_specdec.client import _payload

    assert tuple(_payload(workload, 0)) == api.REQUEST_FIELDS_SENT


@pytest.mark.parametrize("field", (api.RETURN_LOGPROB, api.TOP_LOGPROBS_NUM))
def test_logprob_fields_a_reference_sends_are_sglangs(api_types, field):
    assert field in api_types.GenerateRequest.__struct_fields__, moved([field], (), "SGLang's GenerateRequest")


def test_a_reference_asks_for_top_logprobs_by_those_names_only():
    workload = Workload(name="w", prompts=(Prompt("hi"),), max_new_tokens=4, concurrency=1)
    from pytest_specdec.client import _payload

    assert _payload(workload, 0, 2) == {**_payload(workload, 0), api.RETURN_LOGPROB: True, api.TOP_LOGPROBS_NUM: 2}


def test_output_top_logprobs_as_sglang_shapes_them_give_the_margin(srt):
    """SGLang's own detokenize_top_logprobs_tokens (run from its source, no tokenizer: the
    client sends no return_text_in_logprobs) shapes each position's top logprobs as
    [[logprob, id, null], ...], best first as its top-k gives them; the client reads the first
    two's difference from that JSON."""
    cls = next(n for n in ast.walk(srt("managers/tokenizer_manager.py"))
               if isinstance(n, ast.ClassDef) and n.name == "TokenizerManager")
    module = ast.Module([function(cls, "detokenize_logprob_tokens"), function(cls, "detokenize_top_logprobs_tokens")], [])
    scope: dict = {"List": typing.List}
    exec(compile(ast.fix_missing_locations(module), "tokenizer_manager.py", "exec"), scope)
    manager = SimpleNamespace()
    manager.detokenize_logprob_tokens = lambda *a: scope["detokenize_logprob_tokens"](manager, *a)
    rows = scope["detokenize_top_logprobs_tokens"](manager, [[-0.1, -2.4], [-0.69, -0.6904]], [[5, 7], [3, 9]], False)
    from pytest_specdec.client import _margins

    margins = _margins(json.loads(json.dumps({api.OUTPUT_TOP_LOGPROBS: rows})))
    assert margins == pytest.approx((2.3, 0.0004))


# -- /generate: what the client reads --------------------------------------------------------------

@pytest.mark.parametrize("key", api.META_INFO_KEYS_READ)
def test_meta_info_key_read_is_written_by_sglang(srt, key):
    written = keys_written(srt("managers/tokenizer_manager.py"), "meta_info")
    assert key in written, moved([key], written, "the meta_info SGLang's tokenizer manager builds")


def test_responses_carry_text_and_output_ids(srt):
    keys = dict_keys(srt("managers/tokenizer_manager.py"))
    read = {api.RESPONSE_TEXT, api.RESPONSE_OUTPUT_IDS}
    assert read <= keys, moved(read, keys, "the responses SGLang's tokenizer manager builds")


def test_finish_reasons_carry_their_type(srt):
    tree = srt("managers/schedule_batch.py")
    reasons = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name.startswith("FINISH")]
    assert reasons, "SGLang no longer defines FINISH_* reasons in schedule_batch.py"
    for cls in reasons:
        assert api.FINISH_TYPE in dict_keys(function(cls, "to_json")), f"{cls.name}.to_json has no {api.FINISH_TYPE!r}"


def test_an_abort_says_why(srt):
    abort = function(next(n for n in ast.walk(srt("managers/schedule_batch.py"))
                          if isinstance(n, ast.ClassDef) and n.name == "FINISH_ABORT"), "to_json")
    values = {k.value: template(v) for n in ast.walk(abort) if isinstance(n, ast.Dict)
              for k, v in zip(n.keys, n.values) if k is not None and template(k)}
    assert values.get(api.FINISH_TYPE) == api.FINISH_ABORT and api.FINISH_MESSAGE in values, values


def test_abort_request_ends_requests_with_sglangs_reasons(srt):
    """The engine's /abort_request (its Scheduler.abort): SGLang serves the route, ends a running
    request with FINISH_ABORT() and one taken from its waiting queue with its tokenizer manager's
    default message, as the engine does."""
    assert "/abort_request" in routes(srt("entrypoints/http_server.py"))
    init = function(next(n for n in ast.walk(srt("managers/schedule_batch.py"))
                         if isinstance(n, ast.ClassDef) and n.name == "FINISH_ABORT"), "__init__")
    assert f"self.message = message or {protocol.ABORT_RUNNING['message']!r}" in ast.unparse(init)
    handler = function(srt("managers/tokenizer_manager.py"), "_handle_abort_req")
    assert f"recv_obj.abort_message or {protocol.ABORT_WAITING['message']!r}" in ast.unparse(handler)


# -- /server_info and /v1/models ---------------------------------------------------------------------

@pytest.mark.parametrize("key", api.SERVER_ARGS_READ)
def test_server_info_key_read_is_a_server_argument(server_args, key):
    names = {f.name for f in server_args.record_fields(server_args.ServerArgs)}  # what resolved_dict() serves
    assert key in names, moved([key], names, "ServerArgs (whose fields /server_info returns)")


def test_model_info_says_the_model_served_now(srt):
    """An attached server's model is read from /model_info first: SGLang moves it there on a
    weight update, while /server_info keeps the one it started with."""
    keys = dict_keys(function(srt("entrypoints/http_server.py"), "model_info"))
    assert set(api.MODEL_INFO_READ) <= keys, moved(api.MODEL_INFO_READ, keys, "/model_info")


def test_the_engines_internal_state_adds_the_keys_sglangs_scheduler_adds(srt):
    """The embedded engine's internal_states[0] adds these to its server arguments, as SGLang's
    scheduler adds them to its resolved ones."""
    topology = function(srt("managers/scheduler_components/internal_state.py"), "_add_topology")
    keys = {template(t.slice) for n in ast.walk(topology) if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Subscript)}
    assert keys == {"world_size", "startup_time", "effective_max_running_requests_per_dp",
                    "last_gen_throughput"}, keys


def test_the_engines_startup_figures_have_sglangs_shape(srt):
    from pytest_specdec.engine import runtime

    built = dict_keys(function(srt("observability/startup_time.py"), "build_scheduler_startup_time"))
    assert built == set(runtime.startup_time(load_weight=0, kv_cache_allocation=0, scheduler_e2e=0)), built
    phases = next(n.value for n in ast.walk(srt("model_executor/graph_memory_usage.py")) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "GRAPH_MEMORY_USAGE_KEYS" for t in n.targets))
    assert tuple(template(e) for e in phases.elts) == runtime.GRAPH_PHASES


def test_max_req_input_len_is_in_the_schedulers_info(srt):
    keys = dict_keys(function(srt("managers/scheduler.py"), "get_init_info"))
    assert api.INFO_MAX_REQ_INPUT_LEN in keys, moved([api.INFO_MAX_REQ_INPUT_LEN], keys, "the scheduler's info")


def test_model_cards_state_the_context_length(srt):
    card = class_fields(srt("entrypoints/openai/protocol.py"), "ModelCard")
    assert api.MODEL_CARD_MAX_LEN in card, moved([api.MODEL_CARD_MAX_LEN], card, "ModelCard")


def test_model_cards_are_created_at_the_request_as_sglangs_are(srt, monkeypatch):
    """SGLang's ModelCard takes `created` from its default_factory, so each /v1/models answer
    carries the time of its request; the engine's carried its start time."""
    card = class_fields(srt("entrypoints/openai/protocol.py"), "ModelCard")
    assert ast.unparse(card["created"]) == "Field(default_factory=lambda: int(time.time()))"
    engine = server.EngineServer(host="127.0.0.1", port=0, scheduler=None, metrics=None, faults=None,
                                 context_length=8, server_args={}, model_info={}, served_model_name="m", version="v")
    monkeypatch.setattr(server.time, "time", lambda: 4242.9)
    listed = json.loads(asyncio.run(engine.list_models(None)).body)
    one = json.loads(asyncio.run(engine.retrieve_model(SimpleNamespace(match_info={"model": "m"}))).body)
    assert listed["data"][0]["created"] == one["created"] == 4242


# -- /v1/tokenize: the context-length guard's count -----------------------------------------------

def test_tokenize_takes_a_prompt_or_a_list_and_adds_special_tokens_by_default(srt):
    """The guard sends its prompts as one list and counts what /generate will: special tokens in."""
    fields = class_fields(srt("entrypoints/openai/protocol.py"), "TokenizeRequest")
    assert {api.TOKENIZE_PROMPT, api.TOKENIZE_ADD_SPECIAL_TOKENS} <= set(fields), \
        moved([api.TOKENIZE_PROMPT, api.TOKENIZE_ADD_SPECIAL_TOKENS], fields, "TokenizeRequest")
    cls = next(n for n in ast.walk(srt("entrypoints/openai/protocol.py"))
               if isinstance(n, ast.ClassDef) and n.name == "TokenizeRequest")
    prompt = next(ast.unparse(n.annotation) for n in cls.body
                  if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) == api.TOKENIZE_PROMPT)
    assert "List[str]" in prompt, f"TokenizeRequest.prompt is {prompt}: no list of prompts"
    assert field_default(fields[api.TOKENIZE_ADD_SPECIAL_TOKENS]) is True


def test_tokenize_answers_with_the_count(srt):
    fields = class_fields(srt("entrypoints/openai/protocol.py"), "TokenizeResponse")
    read = {api.TOKENIZE_COUNT, api.TOKENIZE_TOKENS, api.TOKENIZE_MAX_MODEL_LEN}
    assert read <= set(fields), moved(read, fields, "TokenizeResponse")


def test_a_server_without_a_tokenizer_answers_tokenize_with_a_500_naming_it(srt, server_args):
    """--skip-tokenizer-init leaves the tokenizer manager's tokenizer None; the handler calls its
    encode unchecked and answers the AttributeError as a 500, which the counter takes for "cannot
    count" (client.NO_TOKENIZER) rather than a broken server."""
    assert api.SKIP_TOKENIZER_INIT_FLAG in upstream_parser(server_args)._option_string_actions
    manager = srt("managers/tokenizer_manager.py")
    unset = [n for n in ast.walk(manager) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
             and n.value.value is None and any(ast.unparse(t) == "self.tokenizer" for t in n.targets)]
    assert unset, "SGLang's tokenizer manager no longer sets self.tokenizer = None without a tokenizer"
    refusal = "The engine initialized with skip_tokenizer_init=True cannot accept text prompts"
    assert any(t.startswith(refusal) for t in templates(manager)), \
        "SGLang without a tokenizer may take text prompts now: config.SGLANG_FLAGS_REFUSED need not refuse the flag"
    handler = function(next(n for n in ast.walk(srt("entrypoints/openai/serving_tokenize.py"))
                            if isinstance(n, ast.ClassDef) and n.name == "OpenAIServingTokenize"),
                       "_handle_non_streaming_request")
    source = ast.unparse(handler)
    assert "tokenizer = self.tokenizer_manager.tokenizer" in source and "tokenizer.encode(" in source
    assert "tokenizer is None" not in source, "SGLang's /v1/tokenize now checks for a missing tokenizer"
    assert f"{api.TOKENIZE_FAILED}: {{}}" in templates(handler) and "INTERNAL_SERVER_ERROR" in source
    try:
        None.encode("x")
    except AttributeError as exc:
        assert str(exc) == api.TOKENIZE_NO_TOKENIZER  # Python's words for it, which the 500 carries


def test_the_engine_tokenizes_as_sglang_answers():
    """Its answer has TokenizeResponse's keys, a list for a list, BOS only with special tokens."""
    from pytest_specdec.engine.tokenizer import BOS_ID, ByteTokenizer

    encode = ByteTokenizer().encode
    one = openai_api.tokenize({api.TOKENIZE_PROMPT: "ab"}, encode=encode, context_length=64)
    assert one == {api.TOKENIZE_TOKENS: [BOS_ID, 97, 98], api.TOKENIZE_COUNT: 3, api.TOKENIZE_MAX_MODEL_LEN: 64}
    many = openai_api.tokenize({api.TOKENIZE_PROMPT: ["ab", ""], api.TOKENIZE_ADD_SPECIAL_TOKENS: False},
                               encode=encode, context_length=64)
    assert many[api.TOKENIZE_TOKENS] == [[97, 98], []] and many[api.TOKENIZE_COUNT] == [2, 0]


# -- endpoints -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [api.GENERATE, api.HEALTH, api.HEALTH_GENERATE, api.SERVER_INFO,
                                  api.SERVER_INFO_OLD, api.MODELS, api.MODEL_INFO, api.TOKENIZE,
                                  api.TOKENIZE_ALIAS, api.FLUSH_CACHE])
def test_endpoint_is_served(srt, path):
    served = routes(srt("entrypoints/http_server.py"))
    assert path in served, moved([path], served, "SGLang's HTTP routes")


def test_the_live_load_is_served_with_the_counts_the_sharing_check_reads(srt):
    """/v1/loads (sharing.SharingCheck.in_flight): its router, included by the HTTP server, answers
    {"loads": [LoadSnapshot.to_dict(include)]}, whose core keys hold the counts read; `core` is a
    section; the engine answers those keys, a subset of SGLang's core ones. /get_load is gone."""
    loads = srt("entrypoints/v1_loads.py")
    assert route_methods(loads, owner="router") == {api.LOADS: {"GET"}}
    assert "app.include_router(v1_loads_router)" in ast.unparse(srt("entrypoints/http_server.py"))
    handler = ast.unparse(function(loads, "get_loads"))
    assert "include: Optional[str]=None" in handler and f"'{api.LOADS_LIST}': loads" in handler, handler
    snapshot = next(n for n in ast.walk(srt("managers/load_snapshot.py"))
                    if isinstance(n, ast.ClassDef) and n.name == "LoadSnapshot")
    fields = [n.target.id for n in snapshot.body if isinstance(n, ast.AnnAssign)]
    sections = {"memory", "speculative", "lora", "disaggregation", "queues"}
    core = [f for f in fields if f not in sections]
    assert {api.LOAD_DP_RANK, api.LOAD_RUNNING, api.LOAD_WAITING} <= set(core), core
    valid = next(ast.literal_eval(n.value.args[0]) for n in snapshot.body
                 if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "VALID_SECTIONS")
    assert api.LOADS_CORE in valid and valid == server.LOAD_SECTIONS
    assert api.LOADS_OLD not in routes(srt("entrypoints/http_server.py"))  # LOADS_OLD: for older releases

    class Scheduler:
        max_total_num_tokens, max_batch = 64, 2

        def load(self):
            return 1, 0

    engine = server.EngineServer(host="127.0.0.1", port=0, scheduler=Scheduler(), metrics=None, faults=None,
                                 context_length=8, server_args={}, model_info={}, served_model_name="m", version="v")
    request = SimpleNamespace(query={"include": api.LOADS_CORE})
    body = json.loads(asyncio.run(engine.get_loads(request)).body)
    load, = body[api.LOADS_LIST]
    assert set(load) <= set(core) and (load[api.LOAD_RUNNING], load[api.LOAD_WAITING]) == (1, 0)
    refused = asyncio.run(engine.get_loads(SimpleNamespace(query={"include": "core,bogus"})))
    assert refused.status == 400


def route_methods(tree: ast.Module, owner: str = "app") -> dict[str, set[str]]:
    """Each FastAPI route's path (its `{name:path}` converters dropped) and the methods its
    decorators declare: `@app.get` GET alone (FastAPI's APIRoute adds no HEAD, which is why SGLang
    declares `@app.head` where it wants one), `@app.api_route(..., methods=[...])` those."""
    declared: dict[str, set[str]] = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in n.decorator_list:
                if not (isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant)
                        and isinstance(d.func, ast.Attribute) and getattr(d.func.value, "id", None) == owner):
                    continue
                path = re.sub(r"\{(\w+):\w+\}", r"{\1}", d.args[0].value)
                if d.func.attr == "api_route":
                    methods = next(ast.literal_eval(k.value) for k in d.keywords if k.arg == "methods")
                else:
                    methods = [d.func.attr.upper()]
                declared.setdefault(path, set()).update(methods)
    return declared


def engine_route_methods() -> dict[str, set[str]]:
    """The engine's routes and the methods each takes, /metrics (a mount there) aside."""
    engine = server.EngineServer(host="127.0.0.1", port=0, scheduler=None, metrics=None, faults=None,
                                 context_length=8, server_args={}, model_info={}, served_model_name="m", version="v")
    served: dict[str, set[str]] = {}
    for route in engine.app().router.routes():
        path = route.resource.canonical
        if not path.startswith(api.METRICS):
            served.setdefault(path, set()).add(route.method)
    return served


def test_the_engine_takes_on_each_route_the_methods_sglang_declares(srt):
    """A method SGLang's route does not declare is its 405 (HEAD on a GET route among them); one
    it declares is served. The engine's aiohttp routes took HEAD on every GET route."""
    declared = route_methods(srt("entrypoints/http_server.py"))
    declared.update(route_methods(srt("entrypoints/v1_loads.py"), owner="router"))  # included by http_server
    served = engine_route_methods()
    assert {path: declared.get(path) for path in served} == served


def test_the_root_answers_as_sglangs(srt):
    tree = srt("entrypoints/http_server.py")
    root = function(tree, "sglang_root")
    assert {ast.unparse(d) for d in root.decorator_list} == {"app.get('/')", "app.head('/')"}
    assert [ast.literal_eval(n.value) for n in ast.walk(root) if isinstance(n, ast.Return)] == [server.ROOT_ANSWER]


def test_health_skips_its_generation_where_sglangs_setting_says_as_the_engine_does(srt, monkeypatch):
    """server.EngineServer.health: /health (not /health_generate) answers 200 at once with
    SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION off (on by default), read as SGLang's EnvBool reads it."""
    health = ast.unparse(function(srt("entrypoints/http_server.py"), "health_generate"))
    assert ("if not envs.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION.get() and request.url.path == '/health':\n"
            "        return Response(status_code=200)") in health, health
    environ = srt("environ.py")
    assert "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION = EnvBool(True)" in ast.unparse(environ)
    parse = next(n for n in ast.walk(environ) if isinstance(n, ast.ClassDef) and n.name == "EnvBool")
    words = [ast.literal_eval(n.comparators[0]) for n in ast.walk(parse) if isinstance(n, ast.Compare)]
    assert words == [["true", "1", "yes", "y"], ["false", "0", "no", "n"]], words
    for word, meant in [(w, True) for w in words[0]] + [(w, False) for w in words[1]] + [("maybe", True)]:
        monkeypatch.setenv("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", word.upper())
        assert server._env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True) is meant, word


def test_streams_are_typed_as_the_engine_types_them(srt, sglang_reference):
    """server.EngineServer._open_stream: the /generate and OpenAI streams are StreamingResponses of
    media_type text/event-stream and no headers, and Starlette adds the charset to a text type."""
    streams = (("entrypoints/http_server.py", "serve_generate_request"),
               ("entrypoints/openai/serving_chat.py", "_handle_streaming_request"),
               ("entrypoints/openai/serving_completions.py", "_handle_streaming_request"))
    calls = [n for module, name in streams for n in ast.walk(function(srt(module), name))
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "StreamingResponse"]
    assert len(calls) == 3, [ast.unparse(c) for c in calls]
    for call in calls:
        keywords = {k.arg: k.value for k in call.keywords}
        assert ast.literal_eval(keywords["media_type"]) == "text/event-stream" and "headers" not in keywords
    starlette = ast.unparse(_parse(sglang_reference / "starlette" / "responses.py"))
    assert "if content_type.startswith('text/') and 'charset=' not in content_type.lower():\n" \
           "                content_type += '; charset=' + self.charset" in starlette


def test_metrics_are_served_on_every_path_under_metrics_for_every_method(srt):
    """A Mount takes every method; SGLang widens its path to any that starts with /metrics (no
    307 to /metrics/), and Prometheus' ASGI app answers each alike, as metrics.exposition does."""
    add = ast.unparse(function(srt("utils/common.py"), "add_prometheus_middleware"))
    assert "metrics_route = Mount('/metrics', make_asgi_app(registry=registry))" in add, add
    assert "metrics_route.path_regex = re.compile('^/metrics(?P<path>.*)$')" in add, add


def json_guarded_routes(tree: ast.Module) -> set[str]:
    """Paths whose route has `dependencies=[Depends(validate_json_request)]`."""
    guarded = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in n.decorator_list:
                if isinstance(d, ast.Call) and d.args and template(d.args[0]) is not None and any(
                        k.arg == "dependencies" and any(getattr(c, "id", None) == "validate_json_request"
                                                        for c in ast.walk(k.value)) for k in d.keywords):
                    guarded.add(d.args[0].value)
    return guarded


def test_the_engine_checks_the_content_type_where_sglang_does(srt):
    """The engine refuses a body not sent as application/json on exactly these routes."""
    guarded = json_guarded_routes(srt("entrypoints/http_server.py"))
    ours = {"/v1/completions", "/v1/chat/completions", api.TOKENIZE, api.TOKENIZE_ALIAS}
    assert ours <= guarded, moved(ours, guarded, "SGLang's routes guarded by validate_json_request")
    assert api.GENERATE not in guarded, "SGLang now guards /generate with validate_json_request: so must the engine"


def test_the_engine_words_the_content_type_error_as_sglang(srt):
    tree = srt("entrypoints/http_server.py")
    check = function(tree, "validate_json_request")
    errors = [ast.literal_eval(n) for n in ast.walk(check) if isinstance(n, ast.Dict)]
    assert errors == [protocol.MEDIA_TYPE_ERROR], errors
    assert "application/json" in templates(check) and ";" in templates(check)
    handler = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and any(
        getattr(a, "id", None) == "RequestValidationError" for d in n.decorator_list for a in ast.walk(d)))
    assert "{} {}" in templates(handler)  # its message: the error, then the list of errors


def test_generate_reads_its_body_into_a_dataclass_as_the_engine_assumes(srt):
    """protocol.read_body words a /generate body FastAPI does not parse as JSON as FastAPI's error
    for the dataclass GenerateReqInput: the route must still take its body as that class."""
    route = function(srt("entrypoints/http_server.py"), "generate_request")
    assert any(isinstance(d, ast.Call) and d.args and template(d.args[0]) == api.GENERATE
               for d in route.decorator_list), "generate_request no longer serves /generate"
    body = route.args.args[0].annotation
    assert getattr(body, "id", None) == "GenerateReqInput", ast.unparse(body)
    cls = next(n for n in ast.walk(srt("managers/io_struct.py")) if isinstance(n, ast.ClassDef)
               and n.name == "GenerateReqInput")
    assert [getattr(d, "id", None) for d in cls.decorator_list] == ["dataclass"], "GenerateReqInput is no dataclass"


def test_the_context_rule_is_sglangs(srt):
    """context_rule (the engine's limits and the plugin's guard) states SGLang's two stages: the
    tokenizer manager's refusals, then the scheduler's request limit, its cut of max_new_tokens and
    its refusal of a prompt near that limit; the engine words each refusal as SGLang does."""
    manager = function(srt("managers/tokenizer_manager.py"), "_validate_one_request")
    code = ast.unparse(manager)
    assert "input_token_num >= self.context_len" in code, code
    assert "max_new_tokens + input_token_num > _max_req_len" in code and "_max_req_len = self.context_len" in code
    worker = ast.unparse(function(srt("managers/tp_worker.py"), "get_worker_info"))
    assert "self.model_config.context_len - 1" in worker, worker
    assert f"max_req_input_len = max_req_len - {context_rule.INPUT_MARGIN}" in worker, worker
    cut = ast.unparse(function(srt("managers/scheduler.py"), "init_req_max_new_tokens"))
    assert "self.max_req_len - input_len - 1" in cut, cut
    scheduler = ast.unparse(function(srt("managers/utils.py"), "validate_input_length"))
    assert "len(req.origin_input_ids) >= max_req_input_len" in scheduler, scheduler
    words = "\n".join(templates(manager) + templates(function(srt("managers/utils.py"), "validate_input_length")))
    for prompt_tokens, max_new_tokens in ((100, 1), (10, 95), (94, 1)):
        with pytest.raises(protocol.Refused) as info:
            protocol.admit(prompt_tokens, protocol.Sampling(max_new_tokens), vocab_size=256, context_length=100)
        pieces = re.split(r"\d+", str(info.value))
        assert all(piece in words for piece in pieces), (str(info.value), words)


def test_a_request_naming_no_max_new_tokens_is_cut_to_the_context_as_sglang_does(srt):
    """SGLang's tokenizer manager checks prompt plus max_new_tokens against the context only where
    the request's sampling_params name it, and its scheduler reads a null as no limit: the engine's
    Sampling.context_checked and UNLIMITED_NEW_TOKENS."""
    manager = ast.unparse(function(srt("managers/tokenizer_manager.py"), "_validate_one_request"))
    assert "max_new_tokens = obj.sampling_params.get('max_new_tokens')" in manager, manager
    assert "max_new_tokens is not None" in manager, manager
    cut = ast.unparse(function(srt("managers/scheduler.py"), "init_req_max_new_tokens"))
    assert "if req.sampling_params.max_new_tokens is not None else 1 << 30" in cut, cut
    assert protocol.UNLIMITED_NEW_TOKENS == 1 << 30


def test_the_prompt_is_given_as_sglang_takes_it(srt):
    """parse_generate words a missing or empty prompt as GenerateReqInput does, takes input_ids over
    a text beside them (SGLang tokenizes the text only without ids), and refuses no prompt id: the
    tokenizer manager checks ids against the vocabulary only for token_ids_logprob."""
    io_struct = srt("managers/io_struct.py")
    words = templates(function(io_struct, "_validate_inputs")) + templates(function(io_struct, "_determine_batch_size"))
    with pytest.raises(protocol.Refused) as info:
        protocol.parse_generate({}, encode=list, vocab_size=256, context_length=100)
    assert str(info.value) in words
    assert protocol.EMPTY_INPUT_IDS in words
    tokenize = ast.unparse(function(srt("managers/tokenizer_manager.py"), "_tokenize_one_request"))
    assert tokenize.index("elif obj.input_ids is not None:\n") < tokenize.index("self._tokenize_texts("), tokenize
    checked = [n for n in ast.walk(srt("managers/tokenizer_manager.py")) if isinstance(n, ast.Compare)
               and any("vocab_size" in ast.unparse(c) for c in n.comparators)]
    assert all("token_id" in ast.unparse(n.left) for n in checked), [ast.unparse(n) for n in checked]
    masked = ast.unparse(function(srt("layers/vocab_parallel_embedding.py"), "get_masked_input_and_mask"))
    assert "input_ = vocab_mask * (input_ - valid_offset)" in masked, masked


def test_the_normalizations_refusals_are_sglangs_in_its_words_and_order(srt):
    """protocol.check_inputs, check_session_pair: GenerateReqInput's normalization refuses the flat
    raw logprob options it cannot serve once a prompt is given, then a single request's empty
    input_ids (unless session_params names a session), then session_id beside session_params,
    then a batch's rids; only a single request's input_ids are checked for emptiness."""
    io_struct = srt("managers/io_struct.py")
    inputs = function(io_struct, "_validate_inputs")
    words = templates(inputs)
    for text in (protocol.FLAT_RAW_MULTI_ITEM, protocol.FLAT_RAW_STREAM, protocol.FLAT_RAW_B64):
        assert text in words, (text, words)
    code = ast.unparse(inputs)
    assert code.index("multi_item_delimiter_indices") < code.index("and self.stream") < code.index("_b64 and (not")
    normalize = ast.unparse(function(io_struct, "normalize_batch_and_arguments"))
    assert protocol.SESSION_PAIR in templates(function(io_struct, "normalize_batch_and_arguments"))
    assert "self.session_id is not None and self.session_params is not None" in normalize, normalize
    order = ("self.routed_dp_rank = self.data_parallel_rank", "self._validate_inputs()",
             "self._determine_batch_size()", "self.session_id is not None", "self._normalize_batch_inputs()",
             "self._validate_rid_uniqueness()")
    assert [normalize.index(step) for step in order] == sorted(normalize.index(step) for step in order), normalize
    size = ast.unparse(function(io_struct, "_determine_batch_size"))
    assert "if len(self.input_ids) == 0:" in size and "self.session_params.get('id')" in size, size
    assert size.index("if self.text is not None:") < size.index("elif self.input_ids is not None:"), size


def test_what_a_server_launched_as_the_engine_refuses_is_sglangs_in_its_words_and_order(srt):
    """protocol.check_served_as_launched: SGLang's generate_request, once the request is normalized
    and before the rids in flight, refuses any max_thinking_tokens without --enable-strict-thinking
    (the engine's case), then a routed_dp_rank outside [0, num_dp_ranks) but for 0 on one rank."""
    generate = function(srt("managers/tokenizer_manager.py"), "generate_request")
    code = ast.unparse(generate)
    words = templates(generate)
    assert protocol.STRICT_THINKING in words, words
    assert protocol.DP_RANK_RANGE.replace("[0, 1)", "[0, {})") in words, words
    assert "obj.max_thinking_tokens is not None and (not get_serving().enable_strict_thinking)" in code, code
    assert "num_dp_ranks <= 1 and obj.routed_dp_rank == 0" in code, code
    assert "obj.routed_dp_rank < 0 or obj.routed_dp_rank >= num_dp_ranks" in code, code
    order = ("obj.normalize_batch_and_arguments()", "obj.max_thinking_tokens is not None",
             "obj.routed_dp_rank is not None", "self._init_req_state(obj, request)")
    assert [code.index(step) for step in order] == sorted(code.index(step) for step in order), code
    for check, body in ((protocol.STRICT_THINKING, {"text": "hi", "max_thinking_tokens": 0}),
                        (protocol.DP_RANK_RANGE.format(1), {"text": "hi", "data_parallel_rank": "1"})):
        with pytest.raises(protocol.Refused, match=re.escape(check)):
            protocol.parse_generate(body, encode=list, vocab_size=256, context_length=100)


def test_the_refusals_of_n_are_sglangs_in_its_words_and_order(srt):
    """parallel.check_lists and SAME_N: GenerateReqInput refuses sampling_params whose n differ,
    then, in its normalization's order, a per-prompt list of each logprob option, a list of
    token_ids_logprob lists and a custom_logit_processor list beside n above 1, in its words."""
    io_struct = srt("managers/io_struct.py")
    assert parallel.SAME_N in templates(function(io_struct, "_handle_parallel_sampling"))
    logprobs = function(io_struct, "_normalize_logprob_params")
    assert parallel.LIST_WITH_N in templates(logprobs)
    normalized = tuple(ast.literal_eval(call.args[2]) for call in ast.walk(logprobs) if isinstance(call, ast.Call)
                       and getattr(call.func, "id", None) == "normalize_param")
    assert normalized == parallel.LIST_FIELDS, normalized
    assert parallel.LIST_WITH_N.format("token_ids_logprob") in templates(logprobs)
    custom = function(io_struct, "_normalize_custom_logit_processor")
    assert parallel.LIST_WITH_N.format("custom_logit_processor") in templates(custom)
    batch = ast.unparse(function(io_struct, "_normalize_batch_inputs"))
    assert batch.index("self._normalize_logprob_params(num)") < batch.index("self._normalize_custom_logit_processor(num)")


def test_sglang_leaves_a_sampling_params_list_of_another_length_unchecked(srt):
    """batch.batch_sampling refuses a sampling_params list whose length is not the batch's in its
    own words because SGLang has none: it neither checks the length (a shorter list fails indexing,
    a 500) nor reads a longer one's extra items. Once SGLang checks it, the engine takes its words."""
    io_struct = srt("managers/io_struct.py")
    normalize = function(io_struct, "_normalize_sampling_params")
    assert "len(" not in ast.unparse(normalize) and not any(isinstance(n, ast.Raise) for n in ast.walk(normalize))
    assert "self.sampling_params = self.sampling_params * self.parallel_sample_num" in ast.unparse(normalize)
    assert "sampling_params=self.sampling_params[i]" in ast.unparse(function(io_struct, "__getitem__"))


def test_a_body_fastapi_cannot_parse_gets_sglangs_http_exception_shape(srt, sglang_reference):
    """protocol.UnparsableBody: Starlette parses a body with Python's json.loads of its bytes (so
    UTF-16, NaN and Infinity are read), and SGLang answers FastAPI's HTTPException for any other
    failure in its ErrorResponse, the status as the type."""
    starlette = _parse(sglang_reference / "starlette" / "requests.py")
    assert "self._json = json.loads(body)" in ast.unparse(function(starlette, "json"))
    http_server = srt("entrypoints/http_server.py")
    handler = next(n for n in ast.walk(http_server) if isinstance(n, ast.AsyncFunctionDef) and any(
        "exception_handler(HTTPException)" in ast.unparse(d) for d in n.decorator_list))
    assert "ErrorResponse(object='error', message=exc.detail, type=str(exc.status_code), code=exc.status_code)" \
        in ast.unparse(handler), ast.unparse(handler)
    assert protocol.UnparsableBody("m").body() == {"object": "error", "message": "m", "type": "400", "param": None,
                                                   "code": 400}


def test_the_engine_refuses_a_sampling_value_out_of_range_in_verifys_words_and_order(srt):
    """protocol.SAMPLING_RANGES and Sampling.verify: SamplingParams.verify's words for each range,
    checked in its order (beam_width, temperature, then the rest), max_new_tokens after them."""
    verify = function(srt("sampling/sampling_params.py"), "verify")
    said = [t for _, t in sorted((n.lineno, template(n)) for n in ast.walk(verify)
                                 if isinstance(n, ast.JoinedStr) and template(n))]
    engine = [r.words for r in protocol.SAMPLING_RANGES.values()]
    temperature = "temperature must be a non-negative finite number, got {}."
    max_new_tokens = "max_new_tokens must be at least 0, got {}."
    assert all(words in said for words in engine + [temperature, max_new_tokens]), said
    order = [said.index(words) for words in [engine[0], temperature, *engine[1:], max_new_tokens]]
    assert order == sorted(order), said


def test_the_engine_refuses_a_lora_adapter_in_sglangs_words(srt):
    """The engine is an SGLang server started without --enable-lora: its refusal, word for word."""
    check = function(srt("managers/tokenizer_manager.py"), "_validate_and_resolve_lora")
    with pytest.raises(protocol.Refused) as info:
        protocol.check_no_lora("{}")
    assert str(info.value) in templates(check), templates(check)


def test_the_openai_routes_route_by_the_dp_rank_header_as_the_engine_does(srt):
    """openai_api.header_dp_rank: serving_base reads X-Data-Parallel-Rank with int() ahead of the
    body's routed_dp_rank, refusing any other value with a 400 HTTPException in these words, which
    handle_request answers with the status as the type; both routes read it as they build the
    request; /generate reads no such header."""
    base = srt("entrypoints/openai/serving_base.py")
    read = function(base, "extract_routed_dp_rank_from_header")
    code = ast.unparse(read)
    assert f"raw_request.headers.get('{openai_api.DP_RANK_HEADER.lower()}')" in code, code
    assert "header_dp_rank = int(header_value)" in code and "return header_dp_rank" in code, code
    assert "HTTPException(status_code=400, detail=f\"Invalid X-Data-Parallel-Rank header" in code, code
    assert openai_api.DP_RANK_HEADER_INVALID in templates(read), templates(read)
    handle = ast.unparse(function(base, "handle_request"))
    assert "except HTTPException as e:" in handle and "err_type=str(e.status_code)" in handle, handle
    for module in ("serving_completions.py", "serving_chat.py"):
        convert = ast.unparse(function(srt("entrypoints/openai/" + module), "_convert_to_internal_request"))
        assert "self.extract_routed_dp_rank_from_header(raw_request, request.routed_dp_rank)" in convert, module
        assert "routed_dp_rank=effective_routed_dp_rank" in convert, module
    assert openai_api.DP_RANK_HEADER.lower() not in ast.unparse(srt("entrypoints/http_server.py")).lower()


def test_the_openai_routes_pass_no_session_params_on_so_the_engine_ignores_them(srt):
    """openai_api's routing hints: both routes declare session_params but never read it."""
    for module in ("serving_completions.py", "serving_chat.py"):
        assert "session_params" not in ast.unparse(srt("entrypoints/openai/" + module)), module
    assert "session_params" in openai_api.COMPLETION_HINTS and "session_params" in openai_api.CHAT_HINTS


def test_the_chats_own_refusals_of_its_options_are_sglangs_in_its_words_and_order(srt):
    """openai_api.check_chat: the chat's _validate_request refuses, after no messages and before a
    completion past the context, a request's chat_template (the engine is launched without
    --trust-request-chat-template, off by default), then the sampling mask and then the flat raw
    output option without return_meta_info."""
    validate = function(srt("entrypoints/openai/serving_chat.py"), "_validate_request")
    words = templates(validate)
    for text in (openai_api.REQUEST_TEMPLATE, openai_api.SAMPLING_MASK_NEEDS_META, openai_api.FLAT_RAW_NEEDS_META):
        assert text in words, (text, words)
    code = ast.unparse(validate)
    assert "request.return_flat_raw_output_top_logprobs and (not request.return_meta_info)" in code, code
    assert "request.return_sampling_mask and (not request.return_meta_info)" in code, code
    assert "'chat_template' in request.chat_template_kwargs" in code, code
    assert field_default(class_fields(srt("arg_groups/fields/serving.py"), "Serving")["trust_request_chat_template"]) \
        is False
    order = ("Messages cannot be empty.", "Request-supplied chat_template", openai_api.SAMPLING_MASK_NEEDS_META,
             openai_api.FLAT_RAW_NEEDS_META, "max_completion_tokens is too large")
    assert [code.index(step) for step in order] == sorted(code.index(step) for step in order), code


def test_the_chats_refusals_of_what_it_cannot_stream_are_sglangs_in_its_words_and_order(srt):
    """openai_api.check_chat_stream: the chat's _convert_to_internal_request raises these
    ValueErrors for a stream before it processes the messages, and handle_request answers a
    ValueError with the type BadRequest."""
    convert = function(srt("entrypoints/openai/serving_chat.py"), "_convert_to_internal_request")
    code = ast.unparse(convert)
    words = templates(convert)
    positions = []
    for name, text in openai_api.STREAM_REFUSALS:
        assert text in words, (text, words)
        assert f"if request.{name}:" in code, name
        positions.append(code.index(text))
    assert positions == sorted(positions) and positions[-1] < code.index("self._process_messages("), code
    assert code.index("if request.stream:") < positions[0], code
    handle = "".join(ast.unparse(function(srt("entrypoints/openai/serving_base.py"), "handle_request")).split())
    assert ("exceptValueErrorase:returnself.create_error_response(message=str(e),"
            f"err_type='{openai_api.ConversionError.err_type}',status_code=400)") in handle, handle


def test_the_openai_routes_read_an_adapter_from_the_model_as_the_engine_does(srt):
    """openai_api.lora_adapter follows serving_base's reading of "base:adapter", which both
    routes apply ahead of lora_path."""
    base = srt("entrypoints/openai/serving_base.py")
    assert "served_model_name" in ast.unparse(function(base, "_parse_model_parameter"))
    for module in ("serving_completions.py", "serving_chat.py"):
        calls = [n for n in ast.walk(srt("entrypoints/openai/" + module)) if isinstance(n, ast.Call)
                 and getattr(n.func, "attr", None) == "_resolve_lora_path"]
        assert [ast.unparse(c) for c in calls] == ["self._resolve_lora_path(request.model, request.lora_path)"], module


def test_the_completion_stream_sends_a_chunk_for_every_output(srt):
    """The engine sends a /v1/completions chunk for every step, text "" included: SGLang's stream
    sets no condition on the delta (its chat stream does, and the engine follows that too)."""
    stream = function(srt("entrypoints/openai/serving_completions.py"), "_generate_completion_stream")
    gated = [ast.unparse(n.test) for n in ast.walk(stream) if isinstance(n, ast.If)
             and any(getattr(x, "id", None) == "delta" for x in ast.walk(n.test))]
    assert not gated, f"SGLang's completion stream now sends a chunk only if {gated}"
    chat = function(srt("entrypoints/openai/serving_chat.py"), "_generate_stream_content")
    assert any(isinstance(n, ast.If) and getattr(n.test, "id", None) == "delta" for n in ast.walk(chat))


def test_the_scheduler_serves_a_refused_prompt_as_one_token_then_aborts(srt):
    """protocol.scheduled: SGLang's scheduler refuses a prompt by replacing it with token 0 and
    marking the request to finish as aborted with a 400; the prefill's token is appended before
    the finish is read, and the output reports the stand-in prompt's length."""
    abort = ast.unparse(function(srt("managers/schedule_batch.py"), "set_finish_with_abort"))
    assert "status_code: int=HTTPStatus.BAD_REQUEST" in abort and "err_type: str='BadRequestError'" in abort
    assert "self.origin_input_ids = array('q', [0])" in abort, abort
    assert "logger.error(f'{error_msg}, self.rid={self.rid!r}')" in abort, abort  # the engine's scheduler logs it so
    assert protocol.ABORT_STUB == (0,)
    update = ast.unparse(function(srt("managers/schedule_batch.py"), "update_finish_state"))
    assert update.index("if self.to_finish:") < update.index("self.output_ids[-new_accepted_len:]"), update
    prefill = ast.unparse(function(srt("managers/scheduler_components/batch_result_processor.py"),
                                   "process_batch_result_prefill"))
    assert prefill.index("req.output_ids.append(next_token_id)") < prefill.index("req.update_finish_state()")
    streamer = ast.unparse(function(srt("managers/scheduler_components/output_streamer.py"), "accept"))
    assert "self.prompt_tokens.append(len(req.origin_input_ids))" in streamer, streamer


def test_an_openai_stream_reports_an_abort_with_a_status_as_an_error_chunk(srt, sglang_reference):
    """openai_api.stream_error: both OpenAI streams answer an abort whose status_code is an
    HTTPStatus with one error chunk typed by its name, and stop; the status stays an HTTPStatus
    from the scheduler to them because SGLang's IPC pickles by default."""
    for module, name in (("serving_completions.py", "_generate_completion_stream"),
                         ("serving_chat.py", "_generate_chat_stream")):
        code = ast.unparse(function(srt(f"entrypoints/openai/{module}"), name))
        assert "isinstance(finish_reason.get('status_code'), HTTPStatus)" in code, module
        assert "self.create_streaming_error_response(finish_reason.get('message', 'Generation aborted.'), " \
               "code.name, code.value)" in code, module
    error = function(srt("entrypoints/openai/serving_base.py"), "create_streaming_error_response")
    assert "json.dumps({'error': error.model_dump()})" in ast.unparse(error)
    assert set(openai_api.stream_error({"status_code": 400})["error"]) == set(
        class_fields(srt("entrypoints/openai/protocol.py"), "ErrorResponse"))
    assert "SGLANG_USE_PICKLE_IPC = EnvBool(True)" in (sglang_reference / "sglang/srt/environ.py").read_text()
    assert "socket.send_pyobj(obj" in ast.unparse(function(srt("managers/io_struct.py"), "sock_send"))


def test_a_rid_in_flight_is_refused_in_sglangs_words_before_any_prompt_is_sent(srt):
    """inflight.py: SGLang's tokenizer manager refuses a request naming a rid in flight (or one
    of its batch's rids twice) with a ValueError, a 400, checking every rid before it sends any;
    /generate and the OpenAI routes all reach it through generate_request."""
    tm = srt("managers/tokenizer_manager.py")
    init = ast.unparse(function(tm, "_init_req_state"))
    check = f"raise ValueError(f'{inflight.DUPLICATE_RID.format('{rid}')}')"
    assert check in init, init
    assert init.index(check) < init.index("self.rid_to_state.update(new_states)")
    generate = ast.unparse(function(tm, "generate_request"))
    assert generate.index("self._init_req_state(obj, request)") < generate.index("_tokenize_one_request")


def test_a_generate_stream_aborts_its_rids_still_in_flight_once_it_ended(srt):
    """inflight.STREAM_ABORT_DELAY_S, server._abort_in_flight: SGLang's /generate stream has its tokenizer manager's abort task
    as background, which aborts each of the request's rids still in flight after a delay, a
    streamed request refused for a rid in flight included."""
    task = ast.unparse(function(srt("managers/tokenizer_manager.py"), "create_abort_task"))
    assert f"await asyncio.sleep({inflight.STREAM_ABORT_DELAY_S:g})" in task, task
    assert "if rid in self.rid_to_state:" in task and "self.abort_request(rid)" in task, task
    # the rids as the request holds them when refused: a batch's as given before its normalization ends
    assert "rids = [obj.rid] if obj.is_single else obj.rid" in task, task
    serve = ast.unparse(function(srt("entrypoints/http_server.py"), "serve_generate_request"))
    assert "background=_global_state.tokenizer_manager.create_abort_task(obj)" in serve, serve


def test_a_completion_of_a_list_of_prompts_is_sglangs_batch(srt):
    """openai_api.parse_completion: SGLang's completion serving refuses an empty prompt in its
    words, hands a list of strings on as a batch's text (else as input_ids, a list of lists being
    a batch), answers a choice a result with its place as index, and sums the usage."""
    serving = srt("entrypoints/openai/serving_completions.py")
    validate = ast.unparse(function(serving, "_validate_request"))
    assert "if not prompt or (isinstance(prompt, list) and all((not p for p in prompt))):" in validate, validate
    assert f"return '{openai_api.EMPTY_PROMPT}'" in validate, validate
    convert = ast.unparse(function(serving, "_convert_to_internal_request"))
    assert "if isinstance(prompt, str) or (isinstance(prompt, list) and isinstance(prompt[0], str)):" in convert
    assert "rid=request.rid" in convert
    build = ast.unparse(function(serving, "_build_completion_response"))
    assert "for idx, ret_item in enumerate(ret):" in build and "index=idx" in build, build
    assert "id=ret[0]['meta_info']['id']" in build, build
    stream = ast.unparse(function(serving, "_generate_completion_stream"))
    assert "index = content.get('index', 0)" in stream and "id=content['meta_info']['id']" in stream
    usage = ast.unparse(function(srt("entrypoints/openai/usage_processor.py"), "calculate_response_usage"))
    assert "sum((r['meta_info'].get('completion_tokens', 0) for r in responses))" in usage, usage


def test_meta_info_keys_are_sglangs_in_its_order(srt):
    """server._meta_info writes SGLang's keys in the order its tokenizer manager does."""
    handle = function(srt("managers/tokenizer_manager.py"), "_handle_batch_output")
    first = next(n for n in ast.walk(handle) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None)
                 == "meta_info" and isinstance(n.value, ast.Dict))
    update = next(n for n in ast.walk(handle) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and n.func.attr == "update" and getattr(n.func.value, "id", None) == "meta_info")
    keys = [template(k) for k in first.value.keys] + [template(k) for k in update.args[0].keys]
    assert keys == ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
                    "reasoning_tokens", "completion_tokens", "cached_tokens"], keys


def _time_keys_in_order(tree: ast.AST, cls: str) -> list[str]:
    """The keys a time-stats class's convert_to_output_meta_info writes, in source order."""
    owner = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    convert = function(owner, "convert_to_output_meta_info")
    keys = [(n.lineno, n.col_offset, template(n.slice)) for n in ast.walk(convert)
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and template(n.slice)]
    keys += [(k.lineno, k.col_offset, template(k)) for n in ast.walk(convert) if isinstance(n, ast.Dict)
             for k in n.keys if k is not None and template(k)]
    return [k for *_, k in sorted(keys)]


def test_the_time_stats_meta_info_carries_under_enable_metrics_are_sglangs(srt):
    """A server with --enable-metrics (the plugin launches SGLang with it; the engine reports it
    on) adds its scheduler's time stats to every answer's meta_info, right after num_retractions,
    and its tokenizer manager's to the last, after the speculative keys: server.SCHEDULER_TIME_KEYS
    and REQUEST_TIME_KEYS are those, in SGLang's order."""
    stats = srt("observability/req_time_stats.py")
    assert _time_keys_in_order(stats, "SchedulerReqTimeStats") == list(server.SCHEDULER_TIME_KEYS)
    assert _time_keys_in_order(stats, "APIServerReqTimeStats") == list(server.REQUEST_TIME_KEYS)
    handle = ast.unparse(function(srt("managers/tokenizer_manager.py"), "_handle_batch_output"))
    order = ["'num_retractions'", "if self.enable_metrics:", "meta_info.update(scheduler_time_stats."
             "convert_to_output_meta_info())", "'reasoning_tokens'", "self._calculate_spec_decoding_metrics("
             "meta_info, recv_obj, i)", "if self.enable_metrics:", "meta_info.update(state.time_stats."
             "convert_to_output_meta_info("]
    at = 0
    for text in order:
        assert text in handle[at:], f"_handle_batch_output no longer has {text!r} where the engine assumes it"
        at = handle.index(text, at) + len(text)


def test_weight_versions_are_sglangs(srt):
    """server._weight_versions and openai_api.response: SGLang's finished request (and a queued one
    it aborts) gets the spans of its output tokens each weights' version made, the last one's
    version as weight_version; an OpenAI answer's metadata is the first prompt's (ret[0]) version
    and spans."""
    spans = ast.unparse(function(srt("utils/weight_versions.py"), "add_weight_versions_to_meta_info"))
    assert "meta_info['weight_versions'] = [{'version': span.version, 'start': span.start, " \
           "'end': min(span.end, num_output_tokens)} for span in visible]" in spans, spans
    endpoint = ast.unparse(function(srt("utils/weight_versions.py"), "build_endpoint_weight_version_metadata"))
    assert "metadata = {'weight_version': meta_info['weight_version']}" in endpoint, endpoint
    assert "if 'weight_versions' in meta_info:" in endpoint, endpoint
    for path in ("entrypoints/openai/serving_completions.py", "entrypoints/openai/serving_chat.py"):
        assert "metadata=build_endpoint_weight_version_metadata(ret[0]['meta_info'])" in ast.unparse(srt(path)), path
    streamer = ast.unparse(srt("managers/scheduler_components/output_streamer.py"))
    assert "if req.finished():\n            self.weight_versions.append(compute_weight_version_spans(" in streamer


def test_metrics_endpoint_is_mounted(srt):
    mounts = [template(n.args[0]) for n in ast.walk(srt("utils/common.py"))
              if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Mount" and n.args]
    assert api.METRICS in mounts, moved([api.METRICS], mounts, "SGLang's mounts")


# -- Prometheus ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", api.METRICS_PARSED)
def test_metric_parsed_is_defined(srt, name):
    defined = {template(k.value) for n in ast.walk(srt("observability/metrics_collector.py"))
               if isinstance(n, ast.Call) for k in n.keywords if k.arg == "name"}
    assert name in defined, moved([name], defined, "SGLang's metrics collector")


def test_generated_tokens_are_counted_per_finished_request_and_not_for_health_probes(srt):
    """What sharing.py reads another client's tokens from: the counter grows by a request's completion
    tokens once it finishes, and SGLang's /health probes (log_metrics=False) are not counted."""
    observe = ast.unparse(function(srt("observability/metrics_collector.py"), "observe_one_finished_request"))
    assert "self.generation_tokens_total.labels(**stream_labels).inc(generation_tokens)" in observe, observe
    tokenizer = ast.unparse(srt("managers/tokenizer_manager.py"))
    assert "if self.enable_metrics and state.obj.log_metrics:\n                self.collect_metrics(" in tokenizer
    health = ast.unparse(srt("entrypoints/http_server.py"))
    assert health.count("log_metrics=False") >= 2, "SGLang's health probes count as generated tokens now"


def test_spec_gauges_read_zero_without_speculation(srt):
    """What server_figures_from_metrics takes an accept length of 0 for: no verified step."""
    stats = function(srt("managers/scheduler_components/metrics_reporter.py"), "report_decode_stats")
    zeroed = {t.id for n in ast.walk(stats) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Constant) and n.value.value == 0 for t in n.targets
              if isinstance(t, ast.Name)}
    assert {"spec_accept_length", "spec_accept_rate"} <= zeroed, zeroed


def test_the_idle_publish_zeroes_the_generation_throughput(srt):
    """What the engine's idle gauges follow (and why /metrics' gen_throughput reads 0 after a workload)."""
    idle = function(srt("managers/scheduler_components/metrics_reporter.py"), "_maybe_log_idle_metrics")
    zeroed = {t.attr for n in ast.walk(idle) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Constant) and n.value.value == 0 for t in n.targets
              if isinstance(t, ast.Attribute)}
    assert "gen_throughput" in zeroed, zeroed


# -- log lines -----------------------------------------------------------------------------------

def test_readiness_line_is_logged(srt):
    assert api.READY_LINE in templates(srt("entrypoints/http_server.py"))


_JOINED_LITERALS = re.compile(r"""["']\s*\n\s*[rbfuRBFU]*["']""")


@pytest.fixture(scope="module")
def sglang_texts(sglang_reference) -> dict[Path, str]:
    """Every module of SGLang's package, lower-cased, adjacent literals split over lines joined
    (`"... crashed "` / `f"with exit code ..."`): a cheap filter before parsing a file."""
    return {f: _JOINED_LITERALS.sub("", f.read_text(errors="replace")).lower()
            for f in sorted((sglang_reference / "sglang").rglob("*.py"))}


@pytest.mark.parametrize("signature", [s for s in api.FATAL_SIGNATURES if s not in api.FATAL_SIGNATURES_FROM_TORCH])
def test_fatal_signature_is_logged_by_sglang(sglang_texts, signature):
    """Matched case-insensitively, as diagnosis.py matches log lines."""
    files = [f for f, text in sglang_texts.items() if signature.lower() in text]
    assert any(signature.lower() in t.lower() for f in files for t in templates(_parse(f))), (
        f"no string in SGLang's source says {signature!r} any more")


def test_the_decode_line_starts_as_the_plugin_expects(srt):
    lines = templates(function(srt("managers/scheduler_components/metrics_reporter.py"), "report_decode_stats"))
    first = next((t for t in lines if t.startswith(api.DECODE_BATCH)), None)
    assert first is not None and metrics.parse_decode_lines([first.replace("{}", "")]), (
        f"no {api.DECODE_BATCH!r} line (as the plugin reads it) in report_decode_stats: {lines[:3]}")


def test_the_decode_line_tagged_with_its_forward_iteration_is_read(srt):
    """SGLANG_LOG_FORWARD_ITERS=1 puts `iter_msg` between the mark and its comma."""
    stats = function(srt("managers/scheduler_components/metrics_reporter.py"), "report_decode_stats")
    tags = [template(n.value.body) for n in ast.walk(stats) if isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", None) == "iter_msg" and isinstance(n.value, ast.IfExp)]
    assert tags and tags[0] is not None, "report_decode_stats no longer builds iter_msg from a template"
    line = next(t for t in templates(stats) if t.startswith(api.DECODE_BATCH))
    tagged = line.replace("{}", tags[0].replace("{}", "4096"), 1).replace("{}", "")
    assert metrics.parse_decode_lines([tagged]), f"the plugin does not read {tagged!r}"


@pytest.mark.parametrize("field", sorted(metrics.DECODE_LINE_FIELDS))
def test_decode_line_field_is_logged(srt, field):
    lines = templates(function(srt("managers/scheduler_components/metrics_reporter.py"), "report_decode_stats"))
    pattern = metrics.DECODE_LINE_FIELDS[field]
    assert any(pattern.search(t.replace("{}", "1.25")) for t in lines), (
        f"report_decode_stats logs nothing /{pattern.pattern}/ reads")


# -- what the engine accepts -------------------------------------------------------------------------

def test_engine_accepts_exactly_sglangs_request_fields(srt):
    sglang = set(class_fields(srt("managers/io_struct.py"), "GenerateReqInput"))
    assert protocol.GENERATE_FIELDS == sglang, (
        f"SGLang added {sorted(sglang - protocol.GENERATE_FIELDS)}, dropped {sorted(protocol.GENERATE_FIELDS - sglang)}")


def test_engine_accepts_exactly_sglangs_sampling_params(api_types):
    sglang = set(api_types.SamplingParams.__struct_fields__)
    assert protocol.SAMPLING_FIELDS == sglang, (
        f"SGLang added {sorted(sglang - protocol.SAMPLING_FIELDS)}, dropped {sorted(protocol.SAMPLING_FIELDS - sglang)}")


@pytest.mark.parametrize("name", sorted(protocol.NEUTRAL_FIELDS))
def test_engine_neutral_field_value_is_sglangs_default(srt, name):
    default = field_default(class_fields(srt("managers/io_struct.py"), "GenerateReqInput")[name])
    assert protocol.NEUTRAL_FIELDS[name].accepts(default), f"SGLang's default {name}={default!r} would be refused"
    assert default in (None, protocol.NEUTRAL_FIELDS[name].off), f"SGLang's default for {name} is now {default!r}"


@pytest.mark.parametrize("name", sorted(protocol.NEUTRAL_SAMPLING))
def test_engine_neutral_sampling_value_is_sglangs_default(api_types, name):
    default = getattr(api_types.SamplingParams(), name)
    assert protocol.NEUTRAL_SAMPLING[name].accepts(default), f"SGLang's default {name}={default!r} would be refused"


#: Values of every JSON type, for the contract's type checks.
JSON_VALUES = ("x", "", 5, -1, 1.5, True, None, [], ["x"], [True], [1.5], {}, {"1": 1.5}, {"1": "x"})


def assert_types_agree(decode, contract_error, neutral, name, values):
    """A value SGLang's contract decoder refuses for its type is the engine's SchemaViolation, and
    one it decodes is not (the engine may still be unable to honour it)."""
    for value in values:
        try:
            decode({name: value})
            sglang = False
        except contract_error:
            sglang = True
        try:
            neutral[name].check_type(name, value)
            engine = False
        except protocol.SchemaViolation:
            engine = True
        assert engine == sglang, f"{name}={value!r}: SGLang's contract {'refuses' if sglang else 'takes'} it"


@pytest.mark.parametrize("name", sorted(protocol.NEUTRAL_SAMPLING))
def test_engine_types_a_neutral_sampling_param_as_sglangs_contract(api_types, name):
    # a watermark struct's own keys are not the engine's
    values = [v for v in JSON_VALUES if v is not None and not (name == "watermark" and v)]
    assert_types_agree(api_types.decode_SamplingParams, api_types.JsonContractError, protocol.NEUTRAL_SAMPLING,
                       name, values)


@pytest.mark.parametrize("name", sorted(protocol.NEUTRAL_FIELDS))
def test_engine_types_a_neutral_field_as_sglangs_contract(api_types, name):
    """As for the sampling parameters, for the top-level fields SGLang's contract decodes (media
    inputs excepted: their shapes are many, and the engine takes none of them)."""
    if name in ("image_data", "video_data", "audio_data"):
        pytest.skip("media inputs are not typed by the engine")
    assert_types_agree(api_types.decode_GenerateRequest, api_types.JsonContractError, protocol.NEUTRAL_FIELDS,
                       name, [v for v in JSON_VALUES if v is not None])


def test_engine_default_max_new_tokens_is_sglangs(api_types):
    assert api_types.SamplingParams().max_new_tokens == protocol.DEFAULT_MAX_NEW_TOKENS


# -- /generate's contract check: the same bodies, the same texts -------------------------------------

#: A value of every JSON shape the contract tells apart: each scalar type, signs, lists whose
#: first item picks a flat list or a batch, maps of each item type, and objects of nested structs.
CONTRACT_VALUES = ("x", "", 5, 0, -1, 2**70, 1.5, 1.0, float("nan"), True, False, None, [], ["x"], [5], [-1],
                   [1.5], [True], [None], ["x", 5], [5, "x"], [[5]], [["x"]], [[5], "x"], [[None]], [None, 5],
                   {}, {"1": 1.5}, {"1": "x"}, {"1": None}, {"url": 5}, {"url": "u", "fps": "x"}, {"bogus": 1},
                   {"enabled": "yes"}, {"protocol_version": 5}, {"actions": [{"payload": [1], "action_id": 5}]},
                   {"prefix": None}, [{"max_new_tokens": "x"}], [{"url": "u"}, 5], [[{"detail": 1}]])


def contract_texts(api_types, body) -> tuple[str | None, str | None]:
    """(SGLang's contract text for ``body``, the engine's), None where it passes."""
    try:
        api_types.GenerateRequest.from_json_value(body)
        sglang = None
    except api_types.JsonContractError as exc:
        sglang = str(exc)
    return sglang, contract.generate_contract_error(body)


@pytest.mark.parametrize("name", sorted(protocol.GENERATE_FIELDS | {"not_in_the_schema"}))
def test_engine_contract_check_of_a_field_is_sglangs(api_types, name):
    """Every value shape for every top-level name: SGLang's decoder and the engine's mirror of it
    refuse the same ones in the same words (a name its schema leaves out is ignored by both)."""
    for value in CONTRACT_VALUES:
        sglang, engine = contract_texts(api_types, {"text": "hi", name: value})
        assert engine == sglang, f"{name}={value!r}"


@pytest.mark.parametrize("name", sorted(protocol.SAMPLING_FIELDS | {"top_q"}))
def test_engine_contract_check_of_a_sampling_param_is_sglangs(api_types, name):
    for value in CONTRACT_VALUES:
        for params in ({name: value}, [{"max_new_tokens": 1}, {name: value}]):
            sglang, engine = contract_texts(api_types, {"text": "hi", "sampling_params": params})
            assert engine == sglang, f"{name}={value!r} in {params!r}"


@pytest.mark.parametrize("body", [
    5, "x", [], None,
    {"stream": "yes", "sampling_params": {"temperature": "hot"}},  # the first key sent is the one named
    {"sampling_params": {"temperature": "hot"}, "stream": "yes"},
    {"sampling_params": {"watermark": {"enabled": True, "salt": 1}}},
    {"sampling_params": {"watermark": {"key": 5}}},
    {"image_data": {"url": "u", "image_grid_thw": [[1, "x"]]}},
    {"kv_hints": [None, {"actions": [5]}]},
    {"input_ids": [[1, 2], [3, True]]}, {"input_ids": [True]}, {"input_ids": [1.5]},
    {"max_thinking_tokens": -(2**70)}, {"custom_labels": {"a": "b", "c": 1}},
])
def test_engine_contract_check_of_a_whole_body_is_sglangs(api_types, body):
    sglang, engine = contract_texts(api_types, body)
    assert sglang is not None and engine == sglang


def test_engine_contract_mirror_declares_sglangs_names(api_types):
    """The unknown-field texts list the declared names in SGLang's order: the mirror's must be it."""
    assert tuple(contract.SAMPLING_FIELD_NAMES) == api_types._FIELDS_SamplingParams
    assert tuple(contract.GENERATE_FIELD_NAMES) == api_types.GenerateRequest.__struct_fields__


@pytest.mark.parametrize("body", [
    {"text": "hi", "stream": "on"},
    {"text": "hi", "return_logprob": "no"},
    {"text": "hi", "sampling_params": {"logit_bias": {"1": "x"}}},
    {"text": "hi", "sampling_params": {"max_new_tokens": "8"}},
    {"text": "hi", "sampling_params": {"n": 1.0}},
    {"text": "hi", "sampling_params": {"top_q": 1}},
    {"text": "hi", "sampling_params": "fast"},
    {"text": "hi", "sampling_params": {"stop": [1]}},
    {"text": "hi", "sampling_params": {"stop_token_ids": [1.5]}},
    {"text": "hi", "sampling_params": {"watermark": {"enabled": 1}}},
    {"text": "hi", "lora_path": 5},
    {"text": "hi", "max_thinking_tokens": -1},
    {"text": "hi", "return_prompt_token_ids": None},
    {"text": [1]},
    {"input_ids": [[1], ["x"]]},
    {"text": "hi", "image_data": 5},
    {"text": "hi", "bogus": 1, "stream": "on"},  # SGLang ignores the unknown name and refuses the value
])
def test_engine_generate_refuses_a_contract_violation_in_sglangs_words(api_types, body):
    """The engine's /generate gate (parse_generate) answers a body SGLang's contract refuses with
    that contract's text, as the body {"error": text}."""
    from pytest_specdec.engine.tokenizer import ByteTokenizer
    sglang, _ = contract_texts(api_types, body)
    tokenizer = ByteTokenizer()
    with pytest.raises(protocol.SchemaViolation) as info:
        protocol.parse_generate(body, encode=tokenizer.encode, vocab_size=tokenizer.vocab_size, context_length=4096)
    assert sglang is not None and info.value.body() == {"error": sglang}


OPENAI_REQUESTS = {"CompletionRequest": (openai_api.COMPLETION_FIELDS, openai_api.COMPLETION_NEUTRAL),
                   "ChatCompletionRequest": (openai_api.CHAT_FIELDS, openai_api.CHAT_NEUTRAL)}


def openai_request_fields(srt, name: str) -> dict:
    """A request model's public fields, its base's (PDRoutingFields) included."""
    tree = srt("entrypoints/openai/protocol.py")
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    fields = {}
    for base in cls.bases:
        if getattr(base, "id", "BaseModel") != "BaseModel":
            fields |= class_fields(tree, base.id)
    fields |= class_fields(tree, name)
    return {k: v for k, v in fields.items() if not k.startswith("_")}


@pytest.mark.parametrize("request_model", sorted(OPENAI_REQUESTS))
def test_engine_accepts_exactly_sglangs_openai_fields(srt, request_model):
    sglang, ours = set(openai_request_fields(srt, request_model)), OPENAI_REQUESTS[request_model][0]
    assert ours == sglang, f"SGLang's {request_model} added {sorted(sglang - ours)}, dropped {sorted(ours - sglang)}"


@pytest.mark.parametrize("request_model", sorted(OPENAI_REQUESTS))
def test_engine_neutral_openai_values_are_sglangs_defaults(srt, request_model):
    fields, neutral = openai_request_fields(srt, request_model), OPENAI_REQUESTS[request_model][1]
    refused = {name: field_default(fields[name]) for name in neutral
               if not neutral[name].accepts(field_default(fields[name]))}
    assert not refused, f"SGLang's defaults the engine would refuse in {request_model}: {refused}"


# -- what FastAPI's validation of a request class refuses ---------------------------------------------

REQUEST_MODELS = {"CompletionRequest": (openai_api.COMPLETION_MODEL, {"prompt": "hi"}),
                  "ChatCompletionRequest": (openai_api.CHAT_MODEL, {"messages": [{"role": "user", "content": "hi"}]}),
                  "TokenizeRequest": (openai_api.TOKENIZE_MODEL, {"prompt": "hi"})}


def pydantic_errors(request_class, body: dict) -> list[dict]:
    """The errors FastAPI hands SGLang's validation handler for ``body``, its locs under "body"."""
    import pydantic

    try:
        request_class.model_validate(dict(body))
    except pydantic.ValidationError as exc:
        return [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
    return []


@pytest.fixture(scope="module")
def openai_protocol(sglang_reference):
    """SGLang's OpenAI request classes themselves (pydantic models; their module imports torch only)."""
    return importlib.import_module("sglang.srt.entrypoints.openai.protocol")


@pytest.mark.parametrize("request_model", sorted(REQUEST_MODELS))
def test_the_engine_refuses_each_null_as_sglangs_request_class_does(openai_protocol, request_model):
    request_class = getattr(openai_protocol, request_model)
    model, prompt = REQUEST_MODELS[request_model]
    differ = {}
    for name in request_class.model_fields:
        body = {**prompt, name: None}
        if str(sglang := pydantic_errors(request_class, body)) != str(model.errors(body)):  # ValueErrors in ctx
            differ[name] = sglang
    assert not differ, f"SGLang's {request_model} answers these nulls otherwise than the engine: {differ}"


@pytest.mark.parametrize("request_model", sorted(REQUEST_MODELS))
def test_the_engine_lists_null_and_missing_errors_as_sglangs_request_class(openai_protocol, request_model):
    request_class = getattr(openai_protocol, request_model)
    model = REQUEST_MODELS[request_model][0]
    body = {"data_parallel_rank": 1, **dict.fromkeys(request_class.model_fields, None)}
    for required in model.required:
        body.pop(required)
    assert pydantic_errors(request_class, body) == model.errors(body)


#: Values of every JSON kind that pydantic's lax mode reads, or refuses, for some type of a field.
LAX_VALUES = [True, 0, 1, 5, -2, 2.0, 2.5, -1.0, 9.2e18, 2.0**63, 1e300, float("inf"), float("nan"), "4", " 4 ", "4.0", "4.5", "1_000",
              "2.5", "nan", "yes", "OFF", " yes", "x", "last", "support", "", [], [1, "2"], [1.5], ["a", None],
              [[1], [2.0]], [["x"]], {}, {"a": 1}, {"1": "0", "2": 1}, {"1": "x", "2": None}, {"a": "x"},
              {"include_usage": "yes", "continuous_usage_stats": 0}, {"include_usage": None, "x": 1},
              {"include_usage": "maybe", "continuous_usage_stats": []}]


@pytest.mark.parametrize("request_model", sorted(REQUEST_MODELS))
def test_the_engine_reads_each_typed_field_as_sglangs_request_class_does(openai_protocol, request_model):
    """pydantic's lax mode (lax.py) for every field the engine types: the same errors for each
    value, or the same value read (a string for an int, a number or a word for a bool, ...)."""
    request_class = getattr(openai_protocol, request_model)
    model, prompt = REQUEST_MODELS[request_model]
    differ = {}
    # messages are read as a list only (the engine reads each message itself, or counts no chat)
    for name in (name for name in model.fields if model.fields[name] not in ("list", "nullable[list]")):
        for value in LAX_VALUES:
            body = {**prompt, name: value}
            if name in model.required:
                body = {name: value}
            ours, errors = model.validated(body)
            try:
                theirs = getattr(request_class.model_validate(dict(body)), name)
            except Exception:  # pydantic's ValidationError, or a later validator's own refusal
                theirs = None
            if hasattr(theirs, "model_dump"):  # a nested class (stream_options): the fields it read
                theirs = theirs.model_dump(exclude_unset=True)
            sglang = pydantic_errors(request_class, body)
            if str(sglang) != str(errors) or (not errors and repr(theirs) != repr(ours[name])):
                differ[f"{name}={value!r}"] = (sglang or theirs, errors or ours[name])
    assert not differ, f"SGLang's {request_model} reads these otherwise than the engine: {differ}"


def test_the_engine_types_the_fields_of_sglangs_request_classes(openai_protocol):
    """Every field the engine types is one of the class's, in its order."""
    for request_model, (model, _) in REQUEST_MODELS.items():
        fields = list(getattr(openai_protocol, request_model).model_fields)
        assert list(model.fields) == [f for f in fields if f in model.fields], request_model


@pytest.mark.parametrize("request_model", ["ChatCompletionRequest", "TokenizeRequest"])
@pytest.mark.parametrize("messages", [[1], [None], ["x", {"role": "user", "content": "hi"}, [], 2.5], []])
def test_a_message_that_is_no_object_is_refused_as_sglangs_message_union_refuses_it(openai_protocol, request_model,
                                                                                    messages):
    """One model_type error per class of the message union, in its order, for each such message."""
    body = {"messages": messages}
    model = REQUEST_MODELS[request_model][0]
    assert str(pydantic_errors(getattr(openai_protocol, request_model), body)) == str(model.errors(body))


#: Chat messages SGLang's message classes refuse or read: a role of neither class (in the wrong
#: case, of another type, null, left out), a content of another type or null, unknown names,
#: tool calls and tools of every shape, and the nulls of fields typed without None inside them.
MESSAGES = [
    {"role": "bot", "content": "hi"}, {"role": "USER", "content": "hi"}, {"role": "System", "content": "hi"},
    {"content": "hi"}, {"role": 5, "content": "hi"}, {"role": None, "content": "hi"}, {"role": "user", "content": 5},
    {"role": "user"}, {"role": "user", "content": None}, {"role": "system", "content": 5},
    {"role": "system", "content": None}, {"role": "system"}, {}, {"role": "user", "content": "hi", "extra": 1},
    {"role": "user", "content": [{"type": "text", "text": "a"}]}, {"role": "system", "content": []},
    {"role": "assistant", "content": "hi", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
    {"role": "assistant", "content": "hi", "tool_calls": [{}]}, {"role": "assistant", "tool_calls": 5},
    {"role": "assistant", "tool_calls": None}, {"role": "assistant", "tool_calls": [None]},
    {"role": "assistant", "tool_calls": [{"id": 1, "index": "x", "type": "fn", "function": None}]},
    {"role": "assistant", "tool_calls": [{"function": {"name": None, "arguments": None}, "type": None}]},
    {"role": "assistant", "tool_calls": [{"function": {"name": 1, "arguments": 5}}]},
    {"role": "assistant", "tool_calls": [{"function": {"arguments": {"a": 1}}}]},
    {"role": "assistant", "content": "hi", "name": None}, {"role": "assistant", "name": 5},
    {"role": "assistant", "prefix": "yes"}, {"role": "assistant", "prefix": "maybe"},
    {"role": "assistant", "phase": "x"},
    {"role": "tool", "tool_call_id": 3, "reasoning_content": 2},
    {"role": "system", "content": "s", "tools": [{"function": {"name": "f"}}]},
    {"role": "system", "tools": [{"function": None}]}, {"role": "system", "tools": [{}]},
    {"role": "system", "tools": 5},
    {"role": "system", "tools": [{"type": None, "function": {"name": None, "strict": "x"}}]},
    {"role": "system", "tools": [{"function": {}}]}, {"role": "user", "content": "x", "tools": 5},
]


@pytest.mark.parametrize("request_model", ["ChatCompletionRequest", "TokenizeRequest"])
@pytest.mark.parametrize("message", MESSAGES, ids=str)
def test_a_message_is_read_as_sglangs_message_classes_read_it(openai_protocol, request_model, message):
    """The errors of SGLang's message union (each class's under its name in the loc), or the
    fields it read: a generic role in any case is read in lower case, unknown names are dropped."""
    request_class, model = getattr(openai_protocol, request_model), REQUEST_MODELS[request_model][0]
    body = {"messages": [message]}
    ours, errors = model.validated(body)
    assert str(pydantic_errors(request_class, body)) == str(errors)
    if not errors:
        theirs = request_class.model_validate(body).messages[0].model_dump(exclude_unset=True)
        read = ours["messages"][0]
        for tool in read.get("tools") or ():
            tool["function"].pop("key_order")  # set by Function's own validator, which its dump leaves out
        assert read == theirs


#: Content parts SGLang's part classes refuse or read: a missing or unknown type, fields missing,
#: null or of another type, each class's constraints and validators (a thinking part's one payload,
#: an image's detail, a video's positive limits, inline audio made a URL). An image's content_hash
#: has its own test: SGLang's validator of it imports transformers, which the reference install lacks.
PARTS = [
    {"type": "text"}, {"type": "text", "text": 5}, {"type": "text", "text": None}, {"text": "a"}, {"type": "txt"},
    {"type": 5, "text": "a"}, {}, "a", None, 5, [], {"type": "text", "text": "a", "extra": 1},
    {"type": "thinking", "thinking": "t"}, {"type": "reasoning", "text": "t"}, {"type": "thinking"},
    {"type": "thinking", "thinking": "t", "text": "u"}, {"type": "thinking", "thinking": 5},
    {"type": "image_url"}, {"type": "image_url", "image_url": "http://x"}, {"type": "image_url", "image_url": {}},
    {"type": "image_url", "image_url": {"url": "u", "detail": "default"}},
    {"type": "image_url", "image_url": {"url": "u", "detail": "huge", "max_dynamic_patch": "x"}},
    {"type": "image_url", "image_url": {"url": "u"}, "modalities": "audio"},
    {"type": "video_url", "video_url": {"url": "v", "fps": 0, "max_frames": -1, "max_image_tokens": "2"}},
    {"type": "video_url", "video_url": {"url": "v", "fps": float("inf"), "max_tokens_per_frame": 0.5}},
    {"type": "video_url", "video_url": {"url": "v", "fps": "2.5", "max_frames": None}},
    {"type": "audio_url", "audio_url": {"url": "a"}}, {"type": "audio_url", "audio_url": {}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "input_audio", "input_audio": {"data": 1, "format": "ogg"}}, {"type": "input_audio"},
    {"type": "tool_reference", "name": "f"}, {"type": "tool_reference"},
]


@pytest.mark.parametrize("request_model", ["ChatCompletionRequest", "TokenizeRequest"])
@pytest.mark.parametrize("role", ["user", "assistant", "system"])
@pytest.mark.parametrize("part", PARTS, ids=str)
def test_a_content_part_is_read_as_sglangs_part_classes_read_it(openai_protocol, request_model, role, part):
    """Each part against SGLang's part union (every class's errors under its name in the loc, a
    thinking part refused outside an assistant's message), or the part as it read it; the engine
    checked a content list only as a list, so a malformed part reached its own refusal."""
    request_class, model = getattr(openai_protocol, request_model), REQUEST_MODELS[request_model][0]
    body = {"messages": [{"role": role, "content": [{"type": "text", "text": "a"}, part]}]}
    ours, errors = model.validated(body)
    assert str(pydantic_errors(request_class, body)) == str(errors)
    if not errors:
        theirs = request_class.model_validate(body).messages[0].model_dump(exclude_unset=True)
        assert ours["messages"][0] == theirs


@pytest.mark.parametrize("value", [None, "md5:1", "sha256:" + "A" * 64, "sha256:" + "g" * 64, "sha256:ab",
                                   "sha256:" + "0" * 64, "SHA256:" + "0" * 64])
def test_an_image_content_hash_is_read_as_sglangs_validator_reads_it(srt, value):
    """SGLang's parse_content_hash, run from its source (its module imports transformers, which
    the reference install lacks): the value it makes, or its ValueError's words."""
    tree = srt("multimodal/cache/identity.py")
    wanted = {"CONTENT_HASH_PREFIX", "_SHA256_HEX_LENGTH", "parse_content_hash"}
    nodes = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in wanted) or (
        isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} & wanted)]
    assert len(nodes) == len(wanted), "SGLang's content_hash check moved"
    scope = {"Optional": typing.Optional}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "identity.py", "exec"), scope)

    def read(check):
        try:
            return check(value)
        except ValueError as exc:
            return f"ValueError: {exc}"

    assert read(chat_parts._content_hash) == read(scope["parse_content_hash"])


TOOLS = [None, [], 5, [None], [{}], [{"function": None}], [{"type": None, "function": {"name": "f"}}],
         [{"function": {}}],
         [{"function": {"name": "f", "parameters": 5, "defer_loading": "yes"}, "defer_loading": 2}]]
TOOL_CHOICES = [None, "auto", "AUTO", 5, {}, {"function": None}, {"function": {"name": None}, "type": None},
                {"function": {"name": "f"}}, {"function": {"name": 3}, "type": "function"}]


@pytest.mark.parametrize("request_model", ["ChatCompletionRequest", "TokenizeRequest"])
@pytest.mark.parametrize("field, value", [*(("tools", v) for v in TOOLS),
                                          *(("tool_choice", v) for v in TOOL_CHOICES)], ids=str)
def test_tools_and_a_tool_choice_are_refused_as_sglangs_classes_refuse_them(openai_protocol, request_model, field,
                                                                           value):
    """Tool, its Function and ToolChoice: a null for a field typed without None, a required one
    left out, a value of another type, each under its loc."""
    request_class, model = getattr(openai_protocol, request_model), REQUEST_MODELS[request_model][0]
    body = {"messages": [{"role": "user", "content": "hi"}], field: value}
    assert str(pydantic_errors(request_class, body)) == str(model.errors(body))


def dataclass_annotations(tree: ast.Module, name: str) -> dict[str, str]:
    """A dataclass's fields, in order, with their annotations as written."""
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    return {node.target.id: ast.unparse(node.annotation) for node in cls.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


def non_optional_fields(tree: ast.Module, name: str) -> dict[str, str]:
    """A dataclass's fields whose annotation admits no None (pydantic refuses their null), in
    order, with their annotations."""
    fields = dataclass_annotations(tree, name)
    return {k: v for k, v in fields.items() if not re.search(r"\bOptional\[|\bAny\b|\bNone\b", v)}


#: GenerateReqInput's fields the engine leaves to FastAPI untyped: Any, media inputs, enum keys, KV hints.
GENERATE_UNTYPED = {"image_data", "video_data", "audio_data", "watermark", "positional_embed_overrides",
                    "num_items_assigned", "kv_hints"}
#: Values for GenerateReqInput's fields besides LAX_VALUES: objects of each kind, lists of lists.
GENERATE_VALUES = [None, {"a": "x"}, {"a": 1.5}, {"a": None}, [{"a": 1}], [{}, 5], [[1, 2], [3]], [[1], None],
                   [[1], [2.5]], [1, 2**63], [[]], ["x", None], [["x"], ["y", None]], ["selected", None], "last",
                   [True, "last"], [[[1.5]]]]


@pytest.fixture(scope="module")
def generate_req_input(srt, sglang_reference, openai_protocol):
    """A pydantic model of GenerateReqInput's fields the engine types, each with the annotation its
    source gives it (the module itself imports torch and more): what FastAPI validates. Made once
    the OpenAI classes are, as in SGLang's server: typing caches an Optional of a Union by the Union's
    members as a set, so ``Optional[Union[List[str], str]]`` is an equal one made before, whose
    members' order is the order of pydantic's errors."""
    import typing
    from importlib import util

    import pydantic

    path = sglang_reference / "sglang" / "srt" / "utils" / "field_validators.py"  # light: array only
    spec = util.spec_from_file_location("sglang_field_validators", path)
    validators = util.module_from_spec(spec)
    spec.loader.exec_module(validators)
    namespace = {**vars(typing), "PlainValidator": pydantic.PlainValidator, **vars(validators)}
    for node in srt("managers/schedule_batch.py").body:  # its type aliases the annotations name
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] in (
                ["ReturnHiddenStatesMode"], ["SamplingLogprobsMode"]):
            namespace[node.targets[0].id] = eval(ast.unparse(node.value), namespace)
    fields = dataclass_annotations(srt("managers/io_struct.py"), "GenerateReqInput")
    typed = {k: (eval(v, namespace), None) for k, v in fields.items() if k in protocol.GENERATE_MODEL.fields}
    return pydantic.create_model("GenerateReqInput", **typed), list(fields)


def test_the_engine_types_every_field_of_sglangs_generate_dataclass(generate_req_input):
    """Every field of GenerateReqInput but those it leaves untyped, in its order."""
    _, fields = generate_req_input
    assert list(protocol.GENERATE_MODEL.fields) == [f for f in fields if f not in GENERATE_UNTYPED]


def test_the_engine_reads_generates_fields_as_sglangs_dataclass_does(generate_req_input):
    """pydantic's lax mode over GenerateReqInput's annotations, input_ids' own validator included:
    the same errors for each value, or the same value read."""
    request_class, _ = generate_req_input
    differ = {}
    for name in protocol.GENERATE_MODEL.fields:
        for value in [*LAX_VALUES, *GENERATE_VALUES]:
            body = {name: value}
            ours, errors = protocol.GENERATE_MODEL.validated(body)
            sglang = pydantic_errors(request_class, body)
            theirs = None if sglang else getattr(request_class.model_validate(dict(body)), name)
            if str(sglang) != str(errors) or (not errors and repr(theirs) != repr(ours[name])):
                differ[f"{name}={value!r}"] = (sglang or theirs, errors or ours[name])
    assert not differ, f"SGLang's GenerateReqInput reads these otherwise than the engine: {differ}"


def test_the_engine_refuses_the_nulls_generates_dataclass_refuses(srt):
    """GenerateReqInput's module imports more than the tests have, so its annotations are read:
    the names and their order, and a plain type's name."""
    sglang = non_optional_fields(srt("managers/io_struct.py"), "GenerateReqInput")
    assert list(protocol.GENERATE_MODEL.non_null) == list(sglang)
    plain = {k: v for k, v in sglang.items() if v in ("bool", "int", "float", "str")}
    assert {k: protocol.GENERATE_MODEL.non_null[k] for k in plain} == plain


@pytest.mark.parametrize("max_tokens", [0, -3, "0", False, 0.0, 1, "4", 2.5, "x"])
def test_a_completions_max_tokens_is_refused_as_sglangs_validator_refuses_it(openai_protocol, max_tokens):
    """CompletionRequest's own validator refuses a max_tokens of 0 or less, on the integer
    pydantic read (a bool, an integral float and integer text too); a value pydantic reads as no
    integer is its type error, and the validator does not run."""
    body = {"prompt": "hi", "max_tokens": max_tokens}
    sglang = pydantic_errors(openai_protocol.CompletionRequest, body)
    assert str(openai_api.COMPLETION_MODEL.errors(body)) == str(sglang)


def test_the_engine_refuses_a_chat_in_the_words_of_sglangs_chat_validation(srt):
    validate = function(srt("entrypoints/openai/serving_chat.py"), "_validate_request")
    said = templates(validate)
    assert "Messages cannot be empty." in said
    assert "max_completion_tokens is too large: {}.This model supports at most {} completion tokens." in said
    served = function(srt("entrypoints/openai/protocol.py"), "to_sampling_params")
    assert "self.max_completion_tokens or self.max_tokens" in ast.unparse(served), (
        "SGLang's chat no longer reads max_completion_tokens or max_tokens as the engine does")


def test_the_engine_caps_stop_strings_as_sglangs_normalize(srt):
    tree = srt("sampling/sampling_params.py")
    cap = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", None) == "MAX_STOP_COUNT")
    assert cap == protocol.MAX_STOP_COUNT
    assert "at most {} stop strings are allowed, got {}" in templates(function(tree, "normalize"))


def test_the_engine_checks_logit_bias_keys_as_sglangs_verify_and_adds_each_bias(srt):
    """verify refuses a key outside the vocabulary (int() of it: Python's words for one that is no
    integer) whatever its bias; the batch adds each bias to its token's logit, so 0 changes none."""
    tree = srt("sampling/sampling_params.py")
    verify = function(tree, "verify")
    assert "logit_bias must has keys in [0, {}], got {}." in templates(verify)
    assert "int(token_id)" in ast.unparse(verify)
    assert protocol.bad_bias_key(("7",), 7) == "logit_bias must has keys in [0, 6], got 7."
    batch = ast.unparse(srt("sampling/sampling_batch_info.py"))
    assert "logit_bias = torch.zeros(len(reqs), vocab_size" in batch, "SGLang no longer adds biases to zeros"
