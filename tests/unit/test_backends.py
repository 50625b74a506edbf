"""One object per backend: what each one decides, and the one configuration id everywhere."""

from __future__ import annotations

import contextlib
import re
import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from http_stub import QuietHandler, serving

from pytest_specdec import backends, configuration
from pytest_specdec.config import KnownIssue, SpecdecConfig
from pytest_specdec.configuration import MatrixCase, configuration_id
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.hardware import GPU, Hardware
from pytest_specdec.options import resolve
from pytest_specdec.servers.attach import identify
from pytest_specdec.servers.spec import ServerSpec
from pytest_specdec.state import RunState
from pytest_specdec.workloads import embedded_token_count

CPU = Hardware((), "none", 0)
SM120 = Hardware((GPU(0, "simulated sm_120", "sm_120"),), "simulated", 0)
SM120_CRASH = KnownIssue("verify crashes", arch="sm_120", methods=("ddtree",), budget=(8,))


def state(backend: backends.Backend, hardware: Hardware = CPU, *, issues=(), **options) -> RunState:
    cfg = SpecdecConfig(source="test", root=Path("."),
                        known_issues=tuple(issues), model="org/model", draft_model="org/draft")
    return RunState(cfg, resolve(options, {}, {}, "test"), hardware, backend)


def test_the_configuration_id_is_one_function():
    case = MatrixCase("blackwell", "ddtree", 4, 16)
    spec = ServerSpec("sglang", "ddtree", tp=4, budget=16, model="m", draft_model="d")
    identity = identify({"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 16, "tp_size": 4})
    assert case.spec_id == spec.id == identity.id == configuration_id("ddtree", 4, 16) == "ddtree-tp4-b16"
    assert case.param_id == "blackwell-ddtree-tp4-b16"
    assert configuration_id("dflash", 1, None) == ServerSpec("embedded", "dflash").id == "dflash-tp1"


@pytest.mark.parametrize("info, said", [
    ({"tp_size": "two"}, "its /server_info says tp_size = 'two', which is not a whole number"),
    ({"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 16.5},
     "speculative_ddtree_budget = 16.5, which is not a whole number"),
    ({"speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": [9]},
     "speculative_num_draft_tokens = [9], which is not a whole number"),
])
def test_an_attached_servers_counts_that_are_no_counts_are_named(info, said):
    """They surfaced as int()'s "invalid literal for int() with base 10"."""
    with pytest.raises(ValueError, match=re.escape(said)):
        identify(info)
    assert identify({"tp_size": "4", "speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 9.0}).id \
        == "ddtree-tp4-b8"


def test_a_server_info_that_is_no_object_is_named():
    """A JSON list surfaced as "'list' object has no attribute 'get'"."""
    from pytest_specdec.servers.attach import fetch_server_info
    from pytest_specdec.servers.diagnosis import ServerError

    class Handler(QuietHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"[1, 2, 3]")

    with serving(Handler) as url:
        with pytest.raises(ServerError, match="answered a JSON list, not an object of server arguments"):
            fetch_server_info(url)


@pytest.mark.parametrize("configured, served, same", [
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", True),
    ("Qwen/Qwen3-8B", "/models/Qwen3-8B", True),
    ("Qwen/Qwen3-8B", "/dev/shm/models/Qwen--Qwen3-8B", True),  # as the plugin provisions it
    ("Qwen/Qwen3-8B", "/hf/hub/models--Qwen--Qwen3-8B/snapshots/0123abc", True),
    ("qwen/qwen3-8b", "Qwen/Qwen3-8B", True),
    ("/ckpt/model/", "/ckpt/model", True),
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-FP8", False),
    ("Qwen/Qwen3-8B", "other/Qwen3-8B", False),
    ("Qwen/Qwen3-8B", "/models/other--Qwen3-8B", False),
    ("/ckpt/run1/final", "/ckpt/run2/final", False),  # one name, two checkpoints
])
def test_a_configured_model_names_what_a_server_serves_across_spellings(configured, served, same):
    from pytest_specdec.servers.attach import same_model

    assert same_model(configured, served) is same


@contextlib.contextmanager
def sglang_stub(server_info: dict, model_info: dict | None = None):
    """A server answering /server_info (and /model_info where given, else 404) as SGLang does."""
    import json

    class Handler(QuietHandler):
        def do_GET(self):
            body = server_info if self.path in ("/server_info", "/get_server_info") else model_info \
                if self.path == "/model_info" else None
            self.send_response(404 if body is None else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body or {"detail": "Not Found"}).encode())

    with serving(Handler) as url:
        yield url


DFLASH_TP1 = {"speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": 16, "tp_size": 1,
              "speculative_draft_model_path": "org/draft", "model_path": "/models/model", "served_model_name": None}


@pytest.mark.parametrize("info, model_info, said", [
    ({**DFLASH_TP1, "speculative_draft_model_path": "z-lab/other-draft"}, None,
     "draft model: configured 'org/draft', served 'z-lab/other-draft'"),
    (DFLASH_TP1, {"model_path": "/models/swapped-in"},  # a weight update: /model_info says it
     "model: configured 'org/model', served '/models/swapped-in'"),
    ({**DFLASH_TP1, "tp_size": 4}, None, "TP: configured 1, served 4"),
    ({**DFLASH_TP1, "speculative_algorithm": "DDTREE", "speculative_num_draft_tokens": 33}, None,
     "budget: configured 16, served 32"),
])
def test_an_attached_server_of_another_setup_is_refused_naming_the_field(info, model_info, said):
    """The draft model, TP and budget served were never compared with the configuration's: the
    run measured them under its key."""
    from pytest_specdec.config import Matrix

    attach = backends.AttachBackend("attached")
    with sglang_stub(info, model_info) as url:
        run = state(attach, server_url=url)
        run = replace(run, config=replace(run.config, matrices={
            "cpu": Matrix("cpu", ("dflash", "ddtree"), (1,), (16,))}))
        with pytest.raises(SpecdecUsageError) as refused:
            attach.check_ready(run)
        attach = backends.AttachBackend("attached")
        ok = state(attach, server_url=url)
        ok = replace(ok, config=replace(ok.config, matrices=run.config.matrices, model=None, draft_model=None))
        if "model" in said:
            attach.check_ready(ok)  # nothing configured, nothing to disagree with
    assert said in str(refused.value), str(refused.value)
    assert str(refused.value).startswith(f"--specdec-server-url {url}: the server serves another setup than the "
                                         f"configuration says"), str(refused.value)


@pytest.mark.parametrize("info, cases, said", [
    ({"model_path": "/models/model"},  # neither method nor TP: every configuration matches it
     [("dflash", 4, None), ("ddtree", 8, 16), ("dflash", 4, None)],
     "does not report its method, TP or budget (per its /server_info), so the 2 configurations "
     "dflash-tp4, ddtree-tp8-b16 of this run would all run on it"),
    ({"tp_size": 4, "model_path": "/models/model"},  # TP said, the method not
     [("dflash", 4, None), ("ar", 4, None)],
     "does not report its method (per its /server_info), so the 2 configurations dflash-tp4, ar-tp4 of"),
    ({k: v for k, v in DFLASH_TP1.items() if k != "tp_size"},  # the method said, TP not: ar is not it
     [("dflash", 1, None), ("dflash", 8, None), ("ar", 1, None)],
     "does not report its TP (per its /server_info), so the 2 configurations dflash-tp1, dflash-tp8 of"),
])
def test_configurations_an_attached_server_cannot_tell_apart_are_refused(info, cases, said):
    """A server that reports neither method nor TP matched every configuration: each one's tests
    ran on it and recorded its figures under their own key (a dflash-tp4 row and a ddtree-tp8-b16
    row of one server). Now the run is refused, naming them, the fields and the fixes."""
    attach = backends.AttachBackend("attached")
    with sglang_stub(info) as url:
        run = state(attach, server_url=url)
        with pytest.raises(SpecdecUsageError) as refused:
            attach.check_apart(run, [MatrixCase("cpu", *case) for case in cases])
        for case in cases:  # one configuration alone is allowed, its tests however many
            attach.check_apart(run, [MatrixCase("cpu", *case)] * 2)
    text = str(refused.value)
    assert text.startswith(f"--specdec-server-url {url}: the server {said}"), text
    first = MatrixCase("cpu", *cases[0])
    budget = f", budget={first.budget}" if first.budget is not None else ""
    assert f"""-m "specdec(method='{first.method}', tp={first.tp}{budget})" runs {first.spec_id} alone""" in text
    assert "attach each configuration's own server in a run of its own" in text, text
    assert ("--specdec-tp=1" in text) == ("TP (" in said), text  # TP alone tells them apart: its flag too


def test_an_attached_servers_model_part_is_what_it_serves():
    """Figures of an attached server were keyed by the configured ids; now by what it says it
    serves, the configured draft only where it drafts and does not say with what."""
    with sglang_stub({**DFLASH_TP1, "speculative_draft_model_path": None}, {"model_path": "/models/model"}) as url:
        attach = backends.AttachBackend("attached")
        assert attach.model_part(state(attach, server_url=url)) == {"model": "/models/model",
                                                                    "draft_model": "org/draft"}
    with sglang_stub({"speculative_algorithm": None, "tp_size": 1, "model_path": "org/model",
                      "speculative_draft_model_path": None}) as url:
        attach = backends.AttachBackend("attached")
        assert attach.model_part(state(attach, server_url=url)) == {"model": "org/model", "draft_model": None}


@pytest.mark.parametrize("skip", [True, False])
def test_an_attached_server_without_a_tokenizer_is_refused_before_any_test(skip):
    """SGLang started with --skip-tokenizer-init refuses text prompts, all the plugin sends: each
    test failed on that refusal in turn. Its /server_info says so, and the run stops at once."""
    import json

    class Handler(QuietHandler):
        def do_GET(self):
            raw = json.dumps({"tp_size": 1, "skip_tokenizer_init": skip}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(raw)

    attach = backends.AttachBackend("attached")
    with serving(Handler) as url:
        if not skip:
            attach.check_ready(state(attach, server_url=url))
            return
        with pytest.raises(SpecdecUsageError, match=re.escape(
                f"--specdec-server-url {url}: the server runs with --skip-tokenizer-init (its /server_info says so), "
                f"so it has no tokenizer and refuses every request the plugin sends, whose prompts are text; "
                f"restart it without --skip-tokenizer-init")):
            attach.check_ready(state(attach, server_url=url))


@pytest.mark.parametrize("method, speculative", [("ar", False), ("AR", False), ("none", False), (None, False),
                                                 ("dflash", True), ("ddtree", True), ("EAGLE3", True)])
def test_which_methods_speculate(method, speculative):
    assert configuration.is_speculative(method) is speculative


def test_algorithm_names_round_trip():
    for method in configuration.METHODS:
        assert configuration.method_of_algorithm(configuration.algorithm_of_method(method)) == method


def test_choose_decides_once_with_a_reason(monkeypatch):
    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: False)
    assert isinstance(backends.choose("auto", CPU, None), backends.EmbeddedBackend)
    attach = backends.choose("auto", CPU, "http://h:1")
    assert attach.name == "attach" and attach.reason == "attached to http://h:1" and not attach.launches
    with pytest.raises(SpecdecUsageError, match="sglang package is not importable"):
        backends.choose("sglang", CPU, None)
    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: True)
    h200 = Hardware((GPU(0, "NVIDIA H200", "sm_90"),), "nvml", 1)
    assert str(backends.choose("auto", h200, None)) == "sglang"


@pytest.mark.parametrize("backend", ["embedded", "sglang"])
def test_a_server_url_beside_a_backend_named_is_refused(monkeypatch, backend):
    """A backend asked for by name launches its servers; an attached run launches none: asked
    for both, the run stops naming the two settings and the fix instead of attaching."""
    monkeypatch.setattr(backends, "sglang_importable", lambda python=None: True)
    settings = resolve({"server_url": "http://h:1"}, {}, {"backend": backend}, "pyproject.toml [tool.specdec]")
    with pytest.raises(SpecdecUsageError) as info:
        backends.choose(settings.backend, CPU, settings.server_url, source=settings.source)
    assert str(info.value) == (
        f"--specdec-server-url http://h:1 attaches to a server someone else runs, but pyproject.toml "
        f"[tool.specdec] key 'backend' {backend} asks for {backend} servers launched by the run; to attach, "
        f"leave the backend at auto (--specdec-backend=auto overrides a value set in a file); to launch "
        f"{backend} servers, drop --specdec-server-url")
    settings = resolve({"server_url": "http://h:1", "backend": "auto"}, {}, {"backend": backend}, "p")
    assert backends.choose(settings.backend, CPU, settings.server_url).name == "attach"


def test_sglang_is_looked_for_in_the_interpreter_that_runs_it(tmp_path):
    """SGLang installed in another interpreter ([tool.specdec.sglang] python, as the README has it)
    was looked for in pytest's own, so --specdec-backend sglang was refused and auto chose the
    embedded engine."""
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    other = tmp_path / "python"
    other.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    other.chmod(0o755)
    h200 = Hardware((GPU(0, "NVIDIA H200", "sm_90"),), "nvml", 1)
    assert str(backends.choose("sglang", CPU, None, str(other))) == "sglang"
    assert str(backends.choose("auto", h200, None, str(other))) == "sglang"
    missing = tmp_path / "bare-python"
    missing.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    missing.chmod(0o755)
    with pytest.raises(SpecdecUsageError, match=rf"not importable in {missing} \(\[tool.specdec.sglang\] python\)"):
        backends.choose("sglang", CPU, None, str(missing))
    assert backends.choose("auto", h200, None, str(missing)).reason.startswith("auto: sglang not importable in ")


def test_embedded_spec_carries_engine_args_and_a_dry_runs_known_crash():
    embedded = backends.EmbeddedBackend("requested")
    rehearsal = state(embedded, SM120, issues=[SM120_CRASH])
    crash = embedded.server_spec(MatrixCase("blackwell", "ddtree", 1, 8), rehearsal)
    assert crash.backend == "embedded" and "--draft-agreement" in crash.extra_args
    assert crash.extra_args[crash.extra_args.index("--fault-crash-budgets") + 1] == "8"
    healthy = embedded.server_spec(MatrixCase("blackwell", "ddtree", 1, 16), rehearsal)
    assert "--fault-crash-budgets" not in healthy.extra_args
    running_them = state(embedded, SM120, issues=[SM120_CRASH], run_known_issues=True)
    assert "--fault-crash-budgets" not in embedded.server_spec(
        MatrixCase("blackwell", "ddtree", 1, 8), running_them).extra_args
    # an entry by method (no budget): the configuration crashes at its first request
    dflash_crash = KnownIssue("draft diverges", arch="sm_120", methods=("dflash",))
    dflash = embedded.server_spec(MatrixCase("blackwell", "dflash", 1, None),
                                  state(embedded, SM120, issues=[dflash_crash]))
    assert dflash.extra_args[dflash.extra_args.index("--fault-crash-after") + 1] == "0"
    argv = embedded.argv_builder(crash, rehearsal)(4242)
    assert argv[1:3] == ["-m", "pytest_specdec.engine"] and "4242" in argv
    assert embedded.token_counter("http://127.0.0.1:4242") is embedded_token_count
    assert embedded.model_path(rehearsal) is None


def test_known_issues_match_the_backends_own_name():
    sglang_only = replace(SM120_CRASH, backend=("sglang",))
    sglang = backends.SGLangBackend("requested")
    assert state(sglang, SM120, issues=[sglang_only]).known_issue("ddtree", 1, 8) is sglang_only
    embedded = backends.EmbeddedBackend("requested")
    assert state(embedded, SM120, issues=[sglang_only]).known_issue("ddtree", 1, 8) is None
    assert state(embedded, SM120, issues=[SM120_CRASH]).known_issue("ddtree", 1, 16) is None


def test_sglang_spec_and_argv(monkeypatch):
    sglang = backends.SGLangBackend("requested")
    run = state(sglang)
    monkeypatch.setattr(backends, "_provision", lambda model, st: f"/cache/{model}")
    spec = sglang.server_spec(MatrixCase("hopper", "dflash", 2, None), run)
    argv = sglang.argv_builder(spec, run)(30000)
    assert argv[argv.index("--model-path") + 1] == "/cache/org/model"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/cache/org/draft"
    assert sglang.model_path(run) == "/cache/org/model"
    counter = sglang.token_counter("http://127.0.0.1:30000/")
    assert (counter.url, counter.fallback) == ("http://127.0.0.1:30000", None)  # the server's count, or none
    assert sglang.token_counter("http://127.0.0.1:30000") is counter  # one per server: its counts are kept


def test_an_attached_server_that_takes_connections_but_never_answers_is_called_hung(monkeypatch):
    """A frozen server accepts connections (the kernel's backlog does) and never answers: not
    'start the server or fix the URL', which sends the user looking at the wrong thing, and
    not a second wait on /server_info's old name. Its 10 s wait cut to 1 s here."""
    from pytest_specdec.servers import attach as attach_module

    monkeypatch.setattr(attach_module.fetch_server_info, "__defaults__", (1.0,))
    with socket.socket() as frozen:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen()
        url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
        attach = backends.AttachBackend("attached")
        with pytest.raises(SpecdecUsageError) as info:
            attach.check_ready(state(attach, server_url=url))
    assert str(info.value) == (f"--specdec-server-url {url}: it accepted the connection but did not "
                               f"answer /server_info within 1s; restart it")


class _OnlyRoot(QuietHandler):
    """A server that answers every path with a 404, as SGLang (or any server) answers a route it lacks."""

    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.mark.parametrize("path, fix", [
    ("/v1", "a server answers there, but the plugin adds SGLang's routes (/server_info, /generate) to the URL, "
            "so give the server's root: {url}"),
    ("/generate/", "a server answers there, but the plugin adds SGLang's routes (/server_info, /generate) to the "
                   "URL, so give the server's root: {url}"),
    ("", "a server answers there, but not SGLang's /server_info: attach an SGLang server or the embedded engine"),
])
def test_an_attached_url_a_server_answers_without_server_info_names_the_fix(path, fix):
    """An OpenAI client's base URL (`http://host:30000/v1`) or a route pasted whole was told 'start
    the server or fix the URL' of a server that was running: the path is the mistake, and the fix
    is its root."""
    attach = backends.AttachBackend("attached")
    with serving(_OnlyRoot) as url:
        with pytest.raises(SpecdecUsageError) as info:
            attach.check_ready(state(attach, server_url=url + path))
    assert str(info.value) == (f"--specdec-server-url {url}{path}: no /server_info at {url}{path.rstrip('/')}: "
                               f"HTTP Error 404: Not Found; {fix.format(url=url)}")


def test_attach_never_launches():
    attach = backends.AttachBackend("attached")
    run = state(attach, server_url="http://127.0.0.1:9")
    spec = attach.server_spec(MatrixCase("cpu", "ar", 1, None), run)
    assert spec.backend == "attach" and spec.id == "ar-tp1"
    with pytest.raises(TypeError):
        attach.argv_builder(spec, run)
    with pytest.raises(SpecdecUsageError, match="--specdec-server-url http://127.0.0.1:9"):
        attach.pool(run, Path("."))


def test_relative_model_paths_are_the_projects_not_the_working_directorys(tmp_path, monkeypatch):
    """A relative model, draft model or model cache in [tool.specdec] is read from the project
    root, as prompt files and the baseline folder are: run from a subfolder, `models/target` was
    looked for there, taken for a Hub id and fetched (offline: refused)."""
    for name in ("target", "draft"):
        (tmp_path / "models" / name).mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path / "tests")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = SpecdecConfig(source="test", root=tmp_path, model="models/target", draft_model="./models/draft",
                        model_cache="cache")
    sglang = backends.SGLangBackend("requested")
    run = RunState(cfg, resolve({}, {}, {}, "test"), CPU, sglang)
    sglang.check(run)
    sglang.check_ready(run)
    spec = sglang.server_spec(MatrixCase("hopper", "dflash", 1, None), run)
    argv = sglang.argv_builder(spec, run)(30000)
    assert argv[argv.index("--model-path") + 1] == str(tmp_path / "models" / "target")
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(tmp_path / "models" / "draft")
    hub = RunState(replace(cfg, model="org/missing"), resolve({}, {}, {}, "test"), CPU, sglang)
    with pytest.raises(SpecdecUsageError, match=re.escape(f"not in the cache {tmp_path / 'cache'}")):
        sglang.model_path(hub)
    missing = RunState(replace(cfg, model="models/gone/target"), resolve({}, {}, {}, "test"), CPU, sglang)
    with pytest.raises(SpecdecUsageError, match=re.escape(f"model directory {tmp_path}/models/gone/target does not")):
        sglang.check(missing)


def test_a_refused_sglang_command_line_names_method_flags(tmp_path, monkeypatch):
    """SGLang without the DDTree pull request refuses the default preset's
    --speculative-ddtree-budget: the error says which setting to change."""
    sglang = backends.SGLangBackend("requested")
    run = state(sglang)
    monkeypatch.setattr(backends, "_provision", lambda model, st: f"/cache/{model}")
    spec = sglang.server_spec(MatrixCase("hopper", "ddtree", 1, 8), run)
    server = sglang.pool(run, tmp_path).factory(spec, ())
    assert server.argv_hint.startswith("match [tool.specdec.sglang] method_flags to this SGLang build")


def test_the_sglang_backend_names_a_missing_model_before_any_server_boots():
    """Without model (or draft_model, for a matrix with speculative methods) every test of the
    missing kind errored as its server was built, after the configurations before it had run."""
    from pytest_specdec.config import Matrix

    sglang = backends.SGLangBackend("requested")
    matrices = {"hopper": Matrix("hopper", ("ar", "dflash", "ddtree"), (1,), (8,))}
    no_model = SpecdecConfig(source="pyproject.toml [tool.specdec]", root=Path("."), matrices=matrices)
    with pytest.raises(SpecdecUsageError, match=r"^the sglang backend serves a model: set model in "
                                                r"pyproject.toml \[tool.specdec\] \(a local folder or a Hub id\)$"):
        sglang.check_ready(RunState(no_model, resolve({}, {}, {}, "test"), CPU, sglang))
    no_draft = replace(no_model, model="/models/target")
    with pytest.raises(SpecdecUsageError, match=r"^methods dflash, ddtree of pyproject.toml \[tool.specdec.matrix.hopper\] need a "
                                                r"draft model on the sglang backend: set draft_model in "
                                                r"pyproject.toml \[tool.specdec\]$"):
        sglang.check_ready(RunState(no_draft, resolve({}, {}, {}, "test"), CPU, sglang))
    ar_only = replace(no_draft, matrices={"hopper": Matrix("hopper", ("ar",), (1,), ())})
    sglang.check_ready(RunState(ar_only, resolve({}, {}, {}, "test"), CPU, sglang))


def test_offline_models_missing_from_the_cache_are_named_once_at_start(tmp_path, monkeypatch):
    """Offline, each configuration errored as its server was built, naming only the draft model
    (provisioned first); both are named now, before any server boots."""
    from pytest_specdec.config import Matrix

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(backends.extras, "require", lambda *a, **k: None)
    sglang = backends.SGLangBackend("requested")
    cfg = SpecdecConfig(source="pyproject.toml [tool.specdec]", root=tmp_path, model="org/target",
                        draft_model="org/draft", model_cache=str(tmp_path / "cache"),
                        matrices={"hopper": Matrix("hopper", ("ddtree",), (1,), (8,))})
    with pytest.raises(SpecdecUsageError, match=r"^model org/target is not in the cache .*; and model "
                                                r"org/draft is not in the cache .*HF_HUB_OFFLINE"):
        sglang.check_ready(RunState(cfg, resolve({}, {}, {}, "test"), CPU, sglang))


def test_a_dry_run_beyond_the_runs_gpus_on_a_backend_that_needs_one_is_refused_before_any_server_boots(monkeypatch):
    """--specdec-arch sm_120 --specdec-gpus 8 on a host whose run was given GPUs 0-1: the six slots
    beyond are no GPU (their servers get CUDA_VISIBLE_DEVICES=-1), and SGLang cannot start without
    one, so each of their tests failed after its server's startup time. Now check_ready says so
    once; the embedded engine on the CPU serves any slot, and a CPU machine hides nothing."""
    from pytest_specdec import hardware
    from pytest_specdec.config import EngineSettings

    monkeypatch.setattr(backends.extras, "require", lambda *a, **k: None)
    monkeypatch.setattr(backends, "_on_hub", lambda model, st: None)  # its Hub ids are not what this checks
    host = tuple(GPU(i, "NVIDIA H100", "sm_90", 81559, f"GPU-{i}") for i in range(2))
    given_two = Hardware(host, "nvml, CUDA_VISIBLE_DEVICES=0,1", 2, 8)
    sglang = backends.SGLangBackend("auto: GPU and sglang present")

    def ready(backend, detected, **options):
        run = state(backend, hardware.resolve(options.get("arch"), options.get("gpus"), detected), **options)
        backend.check_ready(run)

    with pytest.raises(SpecdecUsageError, match=re.escape(
            "--specdec-gpus 8: a dry run of 8 GPUs laid over the 2 this run was given (0, 1); SGLang's servers "
            "need a GPU, and the 6 slots beyond have none (their servers would see CUDA_VISIBLE_DEVICES=-1 and "
            "fail to start, one test after another); set --specdec-gpus to at most 2, or rehearse on the "
            "embedded engine, which runs on the CPU (set --specdec-backend to embedded)")):
        ready(sglang, given_two, arch="sm_120", gpus=8)
    ready(sglang, given_two, arch="sm_120", gpus=2)  # the run's own GPUs: SGLang runs on them
    ready(sglang, given_two, arch="sm_120")
    ready(sglang, Hardware((), "none", 0), arch="sm_120", gpus=8)  # no GPU on the host: nothing to hide
    none_given = Hardware((), "nvml, CUDA_VISIBLE_DEVICES=-1", 0, 8)
    with pytest.raises(SpecdecUsageError, match=re.escape(
            "--specdec-arch sm_120: SGLang's servers need a GPU, and this run was given none of this host's 8 "
            "(CUDA_VISIBLE_DEVICES hides them), so its servers would see none and fail to start; give the run "
            "GPUs in CUDA_VISIBLE_DEVICES, or rehearse on the embedded engine")):
        ready(sglang, none_given, arch="sm_120")

    embedded = backends.EmbeddedBackend("requested")
    ready(embedded, given_two, arch="sm_120", gpus=8)  # the engine on the CPU: every slot serves
    ready(embedded, none_given, arch="sm_120", gpus=4)
    on_gpu = replace(state(embedded, hardware.resolve("sm_120", 8, given_two), arch="sm_120", gpus=8),
                     config=SpecdecConfig(source="pyproject.toml [tool.specdec]", root=Path("."),
                                          engine=EngineSettings(device="cuda")))
    with pytest.raises(SpecdecUsageError, match=re.escape(
            "the embedded engine's servers on device cuda need a GPU, and the 6 slots beyond have none") + ".*" +
            re.escape('or run the engine on the CPU (set device = "auto" in pyproject.toml [tool.specdec.engine])')):
        embedded.check_ready(on_gpu)
    by_flag = replace(on_gpu, config=replace(on_gpu.config, engine=EngineSettings(extra_args=("--device=cuda",))))
    with pytest.raises(SpecdecUsageError, match=re.escape(
            "drop --device cuda from pyproject.toml [tool.specdec.engine] extra_args")):
        embedded.check_ready(by_flag)


def test_the_engine_on_cuda_on_a_host_without_a_gpu_stops_the_run_before_any_server(monkeypatch):
    """device = "cuda" on a machine without a GPU: every test errored in turn with "server ar-tp1
    exited with code 1 before it was ready (no known fatal error in its log)", the reason only in
    each log's last lines."""
    pytest.importorskip("torch")
    import torch

    from pytest_specdec import hardware
    from pytest_specdec.config import EngineSettings

    monkeypatch.setattr(backends.extras, "require", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    embedded = backends.EmbeddedBackend("auto: no GPU")
    cpu_host = state(embedded, hardware.resolve(None, None, Hardware((), "none", 0)))
    embedded.check_ready(cpu_host)  # the engine on the CPU: nothing to say
    on_gpu = replace(cpu_host, config=SpecdecConfig(source="pyproject.toml [tool.specdec]", root=Path("."),
                                                    engine=EngineSettings(device="cuda")))
    with pytest.raises(SpecdecUsageError, match=re.escape(
            "the embedded engine's servers on device cuda need a GPU, and this host has none (none detected, and "
            "torch sees no CUDA device), so each would exit at start, test after test; run the engine on the CPU "
            '(set device = "auto" in pyproject.toml [tool.specdec.engine])')):
        embedded.check_ready(on_gpu)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # a GPU no detector saw: the engine may run
    embedded.check_ready(on_gpu)


def test_every_bad_hub_id_is_named_in_one_error_before_any_server_boots(tmp_path, monkeypatch):
    """With both ids wrong, the first speculative server's build named the draft model (fetched
    first); its fix met the target's error at the next run. Each is listed once, at start."""
    from pytest_specdec import models
    from pytest_specdec.config import Matrix

    class NoSuchRepo:
        asked: list[str] = []

        def list_files(self, repo_id, revision):
            NoSuchRepo.asked.append(repo_id)
            if repo_id != "org/good":
                raise LookupError(f"Repository Not Found: {repo_id}")
            return {"config.json": 2}

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(backends.extras, "require", lambda *a, **k: None)
    monkeypatch.setattr(models, "HubFetcher", NoSuchRepo)
    sglang = backends.SGLangBackend("requested")
    cfg = SpecdecConfig(source="pyproject.toml [tool.specdec]", root=tmp_path, model="org/NoSuch-1B",
                        draft_model="org/NoSuch-draft", model_cache=str(tmp_path / "cache"),
                        matrices={"hopper": Matrix("hopper", ("ar", "dflash"), (1,), ())})
    run = RunState(cfg, resolve({}, {}, {}, "test"), CPU, sglang)
    with pytest.raises(SpecdecUsageError, match=r"^cannot list the files of model org/NoSuch-1B on the Hub "
                                                r"\(LookupError: .*\); check the id.*; and cannot list the files "
                                                r"of model org/NoSuch-draft on the Hub"):
        sglang.check_ready(run)
    assert not (tmp_path / "cache" / "org--NoSuch-1B").exists()  # listed, nothing downloaded
    NoSuchRepo.asked.clear()
    sglang.check_ready(RunState(replace(cfg, model="org/good", draft_model="org/good"), run.settings, CPU, sglang))
    assert NoSuchRepo.asked == ["org/good", "org/good"]
    # an AR-only matrix serves no draft: its id is not asked about
    ar_only = replace(cfg, model="org/good", matrices={"hopper": Matrix("hopper", ("ar",), (1,), ())})
    sglang.check_ready(RunState(ar_only, run.settings, CPU, sglang))

    def refuse(model, st):
        raise SpecdecUsageError(f"model {model} is gone")

    monkeypatch.setattr(backends, "_provision", refuse)
    spec = sglang.server_spec(MatrixCase("hopper", "dflash", 1, None), run)
    with pytest.raises(SpecdecUsageError, match=r"^model org/NoSuch-1B is gone; and model org/NoSuch-draft is gone$"):
        sglang.argv_builder(spec, run)


def test_every_model_path_that_is_not_there_is_named_in_one_error(tmp_path):
    sglang = backends.SGLangBackend("requested")
    cfg = SpecdecConfig(source="test", root=tmp_path, model="models/gone/target", draft_model="./draft")
    with pytest.raises(SpecdecUsageError, match=r"^model directory .*/models/gone/target does not exist.*; and "
                                                r"model directory .*/draft does not exist"):
        sglang.check(RunState(cfg, resolve({}, {}, {}, "test"), CPU, sglang))
