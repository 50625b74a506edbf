"""The engine's command line: the contract flags, budget semantics, and refusals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_specdec.engine.bench import run_method
from pytest_specdec.engine.cli import parse_args, server_args_dict

CONTRACT = ["--host", "127.0.0.1", "--port", "31234", "--method", "ddtree", "--budget", "12", "--block-size", "16",
            "--draft-agreement", "0.8", "--seed", "3", "--model-preset", "tiny", "--num-layers", "1",
            "--device", "cpu", "--context-length", "1024", "--max-batch", "4", "--decode-log-interval", "10",
            "--log-level", "info", "--fault-crash-after", "5", "--fault-crash-budgets", "8,12",
            "--fault-zero-tokens", "--fault-hang", "--fault-slow-start", "0.5", "--fault-crash-warmup",
            "--fault-slow-factor", "1.5", "--fault-lossy", "0.25"]


def test_every_contract_flag_parses():
    args = parse_args(CONTRACT)
    assert (args.method, args.budget, args.block_size, args.draft_agreement, args.seed) == ("ddtree", 12, 16, 0.8, 3)
    assert (args.num_layers, args.context_length, args.max_batch, args.decode_log_interval) == (1, 1024, 4, 10)
    f = args.faults
    assert (f.crash_warmup, f.crash_after, f.crash_budgets, f.zero_tokens, f.hang, f.slow_start) == (
        True, 5, frozenset({8, 12}), True, True, 0.5)
    assert (f.slow_factor, f.lossy) == (1.5, 0.25)
    info = server_args_dict(args)
    assert info["fault_crash_budgets"] == [8, 12] and info["speculative_num_draft_tokens"] == 13
    assert info["fault_slow_factor"] == 1.5 and info["fault_lossy"] == 0.25


@pytest.mark.parametrize("flags, budget", [
    (["--method", "ar", "--budget", "16"], 0),
    (["--method", "dflash"], 15),
    (["--method", "dflash", "--budget", "64"], 15),  # capped at block-size - 1
    (["--method", "dflash", "--budget", "64", "--block-size", "65"], 64),
    (["--method", "ddtree"], 16),
    (["--method", "ddtree", "--budget", "64"], 64),
])
def test_budget_semantics(flags, budget):
    assert parse_args(flags).budget == budget


@pytest.mark.parametrize("flags", [
    ["--method", "ddtree", "--budget", "0"],
    ["--method", "ddtree", "--draft-agreement", "1.5"],
    ["--method", "medusa"],
    ["--method", "ar", "--fault-crash-budgets", "8,x"],
    ["--budget", "8"],
    ["--method", "ar", "--fault-slow-factor", "0.5"],
    ["--method", "ddtree", "--fault-lossy", "1.5"],
    ["--method", "ddtree", "--port", "99999"],
    ["--method", "ddtree", "--budget", "4095"],
    ["--method", "ddtree", "--model-path", "/nonexistent/model"],
])
def test_bad_flags_exit_2(flags):
    res = subprocess.run([sys.executable, "-m", "pytest_specdec.engine", *flags], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 2, res.stderr
    assert "error:" in res.stderr
    assert "Traceback" not in res.stderr, res.stderr


def test_bench_reports_throughput_and_acceptance():
    result = run_method("ddtree", 16, requests=2, max_new_tokens=32, concurrency=2, engine_flags=[])
    assert result["completion_tokens"] == 64
    assert result["output_tok_s"] > 0 and result["ready_s"] > 0
    assert result["accept_length"] > 1.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda sig: sig.name)
def test_a_bench_that_is_killed_takes_its_engine_along(sig, tmp_path):
    """The bench killed (SIGTERM, SIGKILL, a closed terminal's SIGHUP) left its engine, in a
    session of its own, serving until someone found it."""
    import psutil

    bench = subprocess.Popen([sys.executable, "-m", "pytest_specdec.engine.bench", "--methods", "ar",
                              "--requests", "1000", "--", "--model-preset", "tiny"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    engines: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not engines and time.monotonic() < deadline and bench.poll() is None:
            engines = [p for p in psutil.Process(bench.pid).children()
                       if "pytest_specdec.engine" in " ".join(p.cmdline())]
            time.sleep(0.1)
        assert engines, "the bench started no engine"
        bench.send_signal(sig)
        bench.wait(timeout=30)
        gone, alive = psutil.wait_procs(engines, timeout=10)
        assert alive == [], f"engines outlived the bench: {[p.pid for p in alive]}"
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for engine in engines:
            try:
                os.kill(engine.pid, signal.SIGKILL)
            except OSError:
                pass


def test_command_line_and_bench_import_without_torch():
    """Bad flags are refused before the 3-second torch import, and the plugin can import the
    engine's CLI cheaply."""
    code = ("import sys, pytest_specdec.engine.cli, pytest_specdec.engine.bench; "
            "print(sorted(m for m in ('torch', 'aiohttp') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert res.stdout.strip() == "[]", res.stderr


@pytest.mark.parametrize("flags, message", [
    (["--port", "99999"], "--port must be in 1-65535, got 99999"),
    (["--budget", "100000"], "--budget 100000 verifies 100001 tokens a step, which leaves no room for a prompt "
                             "in --context-length 4096; use a smaller budget or a longer context"),
    (["--budget", "63", "--context-length", "64"], "--budget 63 verifies 64 tokens a step"),
    (["--model-path", "/nonexistent/model"], "--model-path /nonexistent/model: no /nonexistent/model; pass a "
                                             ".safetensors file or a directory holding model.safetensors"),
])
def test_flags_that_cannot_serve_are_named_before_the_model_loads(flags, message, capsys, tmp_path):
    """A port past 65535 and a missing model file each ended in a traceback after start-up; a budget
    past the context length never became ready (its warm-up building a tree as long as the context)."""
    with pytest.raises(SystemExit):
        parse_args(["--method", "ddtree", *flags])
    assert message in capsys.readouterr().err
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert parse_args(["--method", "ddtree", "--model-path", str(tmp_path)]).model_path == str(tmp_path)
    assert parse_args(["--method", "ddtree", "--budget", "62", "--context-length", "64"]).budget == 62


def test_the_architecture_page_lists_every_engine_flag():
    import re
    from pathlib import Path

    from pytest_specdec.engine.cli import build_parser

    page = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    usage = page.split("python -m pytest_specdec.engine --host", 1)[1].split("```", 1)[0]
    listed = set(re.findall(r"--[a-z][a-z-]*", "--host" + usage))
    flags = {f for action in build_parser()._actions for f in action.option_strings
             if f.startswith("--") and f != "--help"}
    assert flags - listed == set()


@pytest.mark.parametrize("flags, message", [
    (["--fault-slow-start", "nan"], "--fault-slow-start must be a finite number of seconds >= 0, got nan"),
    (["--fault-slow-start", "inf"], "--fault-slow-start must be a finite number of seconds >= 0, got inf"),
    (["--fault-slow-factor", "nan"], "--fault-slow-factor must be a finite number >= 1 (1 is no slowdown), got nan"),
    (["--fault-slow-factor", "inf"], "--fault-slow-factor must be a finite number >= 1 (1 is no slowdown), got inf"),
    (["--decode-log-interval", "0"], "--decode-log-interval must be >= 1"),
])
def test_numbers_the_engine_cannot_act_on_are_refused(flags, message, capsys):
    """A NaN or infinite delay ended in a traceback (at start, or in the scheduler at the first
    decode step), a NaN slow factor planted no slowdown at all, and a log interval of 0 or less
    was taken as 1, each without a word."""
    with pytest.raises(SystemExit):
        parse_args(["--method", "ddtree", *flags])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("where, flags, message", [
    ("a-file", [], "cannot write the tokenizer into {dir}: it is a file"),
    ("tok", ["--context-length", "0"], "--context-length must be >= 1, got 0"),
])
def test_export_tokenizer_names_what_it_cannot_do(tmp_path, capsys, where, flags, message):
    """A target that was a file ended in a FileExistsError traceback, and a context length of 0 was
    written into the tokenizer as its model_max_length."""
    from pytest_specdec.engine.export_tokenizer import main

    target = tmp_path / where
    if where == "a-file":
        target.write_text("")
    with pytest.raises(SystemExit) as exited:
        main([str(target), *flags])
    assert exited.value.code != 0
    err = capsys.readouterr().err
    assert message.format(dir=target) in err and "Traceback" not in err
    assert not (target / "tokenizer.json").exists()


def test_the_engines_tokenizer_directory_is_shared_only_where_identical(tmp_path):
    """The engine writes its tokenizer for clients at every start, killed engines included: a
    directory per engine would pile up, one per content does not, and a damaged file is rewritten."""
    from pytest_specdec.engine.export_tokenizer import export, export_cached

    first = export_cached(context_length=512, root=tmp_path)
    assert export_cached(context_length=512, root=tmp_path) == first
    other = export_cached(context_length=1024, root=tmp_path)
    assert other != first and sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, other.name])
    (first / "tokenizer.json").write_text("{")
    export_cached(context_length=512, root=tmp_path)
    written = export(tmp_path / "exported", context_length=512)
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in written.iterdir())  # no partial file
    assert all((first / p.name).read_bytes() == p.read_bytes() for p in written.iterdir())


@pytest.mark.parametrize("xdg, expected", [("{tmp}/xdg", "{tmp}/xdg"), ("relative/xdg", "{home}/.cache"),
                                           ("", "{home}/.cache")])
def test_the_tokenizer_cache_is_the_users_not_the_temporary_directory(tmp_path, monkeypatch, xdg, expected):
    from pytest_specdec.engine.export_tokenizer import cache_root

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", xdg.format(tmp=tmp_path))
    assert cache_root() == Path(expected.format(tmp=tmp_path, home=tmp_path / "home")) / "pytest-specdec" / "tokenizers"


def test_an_unwritable_tokenizer_cache_leaves_the_served_name(tmp_path, monkeypatch, caplog):
    """The engine still starts where its cache cannot be written; it says why and what to do."""
    from pytest_specdec.engine.runtime import tokenizer_path_for_clients

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    with caplog.at_level("WARNING", logger="specdec.engine.server"):
        assert tokenizer_path_for_clients(parse_args(["--method", "ar"])) == "specdec-embedded/tiny"
    assert "Set XDG_CACHE_HOME to a writable directory" in caplog.text and str(tmp_path / "a-file") in caplog.text


@pytest.mark.parametrize("case, message", [
    ("not safetensors", "is not a safetensors file (Error while deserializing header"),
    ("config lacks keys", "lacks vocab_size, num_hidden_layers, num_key_value_heads, intermediate_size"),
    ("other weight names", "weights lack 12 tensors, e.g. ['lm_head.weight', 'model.embed_tokens.weight'"),
])
def test_a_model_path_the_engine_cannot_load_is_named_in_one_line(tmp_path, case, message):
    """Each ended in a traceback (SafetensorError, a TypeError of ModelConfig, a KeyError of the
    tied embeddings) instead of a line naming --model-path and what is wrong with it."""
    import torch
    from safetensors.torch import save_file

    config = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "intermediate_size": 128,
              "num_key_value_heads": 2, "vocab_size": 259}
    if case == "not safetensors":
        (tmp_path / "model.safetensors").write_text("garbage")
    else:
        save_file({"transformer.wte.weight": torch.zeros(259, 64)}, str(tmp_path / "model.safetensors"))
    if case == "config lacks keys":
        config = {"hidden_size": 64, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    res = subprocess.run([sys.executable, "-m", "pytest_specdec.engine", "--method", "ar", "--port", "31235",
                          "--model-path", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"--model-path {tmp_path}: ") and message in last, last


@pytest.mark.parametrize("host", ["127.0.0.1", "192.0.2.1", "nonexistent.invalid"])  # a port taken; an
def test_an_address_the_engine_cannot_bind_is_named_in_one_line(host):  # address of no interface; no address
    """Either ended in a 20-line asyncio traceback; SGLang (uvicorn) logs one error line. The
    plugin's diagnosis still finds "address already in use" in it."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "pytest_specdec.engine", "--method", "ar", "--host", host,
                              "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert f"cannot bind {host}:{port}: " in last and "--host and --port" in last, last
    if host == "nonexistent.invalid":  # the resolver's own words, which vary with the network
        assert "unknown error" not in last, last
    else:
        assert {"127.0.0.1": "address already in use", "192.0.2.1": "cannot assign requested address"}[host] in last


@pytest.mark.parametrize("level, shown", [("info", True), ("warning", False)])
def test_the_readiness_line_is_sglangs_in_its_format(capsys, level, shown):
    """The engine's readiness line comes from logs.ready, the one place that words it."""
    from pytest_specdec.engine import logs
    from pytest_specdec.sglang_api import READY_LINE

    logs.setup(level)
    logs.ready()
    err = capsys.readouterr().err
    if shown:
        assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] " + re.escape(READY_LINE) + "\n", err), err
    else:
        assert err == ""  # as SGLang at --log-level warning


def test_bench_names_why_an_engine_exited_before_it_was_ready():
    """An engine that refused its flags and exited was reported as "[Errno 3] No such process":
    killing its process group, gone with it, raised over the engine's own error."""
    with pytest.raises(RuntimeError) as excinfo:
        run_method("ddtree", 16, requests=1, max_new_tokens=4, concurrency=1,
                   engine_flags=["--block-size", "1"])
    assert "--block-size must be >= 2" in str(excinfo.value)


@pytest.mark.parametrize("flags, message", [
    (["--requests", "0"], "--requests must be >= 1, got 0"),
    (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
    (["--methods", "ddtree,foo"], "--methods 'ddtree,foo': give a comma-separated list of ar, dflash, ddtree"),
    (["--methods", "ar,ddtree,ar"], "--methods 'ar,ddtree,ar' lists ar more than once; list each method once"),
    (["--json", "/nonexistent/results.json"], "--json /nonexistent/results.json: name a file in an existing folder"),
    (["--", "--block-size", "1"], "engine flags after '--': --block-size must be >= 2"),
    # the engine took the last --method: `--methods ar -- --method ddtree` reported ddtree's figures as ar's
    (["--methods", "ar", "--", "--meth=ddtree"], "engine flags after '--': --method: the bench sets these "
                                                  "itself (--methods and --budget choose the method and budget, "
                                                  "and it picks the port); remove them"),
    (["--", "--port", "31999", "--budget=4"], "engine flags after '--': --budget, --port: the bench sets"),
])
def test_bench_refuses_unusable_flags_before_any_engine_starts(flags, message, capsys, monkeypatch):
    """A zero --requests printed 0 tok/s and exited 0; a zero --concurrency, an unknown method and an
    engine flag the engine refuses each failed every method after starting its engine; an unwritable
    --json raised a traceback after the whole run, its results lost."""
    from pytest_specdec.engine import bench

    def no_engine(*args, **kwargs):
        raise AssertionError("an engine was started")

    monkeypatch.setattr(bench, "run_method", no_engine)
    with pytest.raises(SystemExit) as excinfo:
        bench.main(flags)
    assert excinfo.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_refuses_a_json_file_in_a_folder_linking_to_itself(tmp_path, capsys, monkeypatch):
    """Path.resolve raised RuntimeError on the link loop (before Python 3.13): a traceback, not the
    one-line usage error of any other --json in no folder."""
    from pytest_specdec.engine import bench

    def no_engine(*args, **kwargs):
        raise AssertionError("an engine was started")

    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.setattr(bench, "run_method", no_engine)
    target = tmp_path / "loop" / "results.json"
    with pytest.raises(SystemExit) as excinfo:
        bench.main(["--json", str(target)])
    assert excinfo.value.code == 2
    assert f"--json {target}: name a file in an existing folder" in capsys.readouterr().err


def test_bench_writes_its_json_whole_or_not_at_all(tmp_path, monkeypatch):
    """The results file was opened for writing (emptied) before they were serialized: a write
    that stopped part-way left half a file in place of the previous results."""
    from pytest_specdec.engine import bench

    result = {"method": "ar", "budget": None, "ready_s": 0.1, "output_tok_s": 1.0, "accept_length": None,
              "completion_tokens": 1, "wall_s": 1.0, "concurrency": 1, "outputs_sha256": "0"}
    monkeypatch.setattr(bench, "run_method", lambda method, *args, **kwargs: dict(result))
    target = tmp_path / "bench.json"
    assert bench.main(["--methods", "ar", "--json", str(target)]) == 0
    assert [r["method"] for r in json.loads(target.read_text())["results"]] == ["ar"]
    before = target.read_text()
    monkeypatch.setattr(bench, "run_method", lambda method, *args, **kwargs: {**result, "extra": object()})
    with pytest.raises(TypeError):  # the write stops part-way
        bench.main(["--methods", "ar", "--json", str(target)])
    assert target.read_text() == before


def test_bench_reports_the_budget_the_engine_verifies():
    """dflash caps its budget at block-size - 1: the bench said budget=16 for a chain of 15."""
    result = run_method("dflash", 16, requests=1, max_new_tokens=8, concurrency=1, engine_flags=[])
    assert result["budget"] == 15


def test_an_interrupted_bench_keeps_the_methods_it_measured(tmp_path, monkeypatch, capsys):
    """Ctrl-C during the third method ended in a traceback, and --json, written only at the end,
    lost the two methods already measured."""
    from pytest_specdec.engine import bench

    def run(method, *args, **kwargs):
        if method == "ddtree":
            raise KeyboardInterrupt
        return {"method": method, "budget": None, "ready_s": 0.1, "output_tok_s": 1.0, "accept_length": None,
                "completion_tokens": 1, "wall_s": 1.0, "concurrency": 1, "outputs_sha256": "0"}

    monkeypatch.setattr(bench, "run_method", run)
    target = tmp_path / "bench.json"
    try:
        code = bench.main(["--json", str(target)])
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped the bench as a traceback")
    assert code == 130
    assert [r["method"] for r in json.loads(target.read_text())["results"]] == ["ar", "dflash"]
    assert f"ddtree interrupted; 2 method(s) measured before it are in {target}" in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGINT to a child process group")
def test_ctrl_c_while_the_engine_loads_is_one_line(tmp_path):
    """Ctrl-C before the engine was serving (its model loading, torch importing) printed a
    traceback of wherever it happened to be."""
    engine = subprocess.Popen([sys.executable, "-m", "pytest_specdec.engine", "--method", "ar",
                               "--port", "1", "--fault-slow-start", "60"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        line = ""
        while "Load weight begin" not in line and time.monotonic() < deadline:
            line = engine.stderr.readline()
        engine.send_signal(signal.SIGINT)
        err = engine.communicate(timeout=30)[1]
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    assert engine.returncode == 130, err
    assert "Traceback" not in err and "Interrupted before the engine was ready; exiting." in err


def test_the_help_says_what_each_flag_does_and_points_to_the_docs_not_the_source():
    """--help sent the user to drafter.py and faults.py, files an installed package's user does
    not read; what it names of the docs must be there."""
    from pathlib import Path

    from pytest_specdec.engine.cli import build_parser

    text = build_parser().format_help()
    assert re.findall(r"\b\w+\.py\b", text) == []
    assert "0 drafts noise" in text
    assert "fail as a real server does" in text
    page = (Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md").read_text()
    pointers = set(re.findall(r"(docs/\w+\.md), ([A-Z][\w ]+?)\)", " ".join(text.split())))
    assert len(pointers) == 1
    for doc, section in pointers:
        assert doc == "docs/ARCHITECTURE.md" and f"## {section}\n" in page
    assert "--draft-agreement P" in page and "--fault-lossy P" in page


def test_the_engine_without_its_extra_says_what_to_install_in_one_line(monkeypatch, capsys):
    """A user with the wheel alone who starts the engine got a ModuleNotFoundError traceback
    (torch), where the plugin says in one line what to install; the command line now does too."""
    from pytest_specdec import extras
    from pytest_specdec.engine import cli

    monkeypatch.setattr(extras, "missing", lambda extra: ["torch>=2.4", "numpy"] if extra == "engine" else [])
    monkeypatch.setitem(sys.modules, "torch", None)  # as where torch is not installed
    monkeypatch.delitem(sys.modules, "pytest_specdec.engine.runtime", raising=False)
    assert cli.main(["--method", "ar", "--port", "30999", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs the `engine` extra, and torch, numpy are not installed" in err, err
    assert f"{extras.CPU_TORCH} (the CPU build" in err and "then pip install numpy" in err, err
