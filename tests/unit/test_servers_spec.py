"""ServerSpec ids and validation, argv for both backends, log diagnosis, ServerError."""

from __future__ import annotations

import pickle
import signal
import sys

import pytest

from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.servers import METHOD_FLAG_PRESETS, ServerError, ServerSpec, build_embedded_argv
from pytest_specdec.servers.diagnosis import (COMMAND_LINE_PREFIX, LogWatcher, describe_exit, fatal_cause,
                                               is_hang_signature, tail, unexplained_kill)
from pytest_specdec.servers.sglang import build_sglang_argv, method_flags_from_config


def sg(method, tp=1, budget=None, **kw):
    kw.setdefault("model", "Qwen/Qwen3-8B")
    kw.setdefault("draft_model", "z-lab/Qwen3-8B-DFlash")
    return ServerSpec("sglang", method, tp=tp, budget=budget, **kw)


def flag(argv, name):
    """Value after `name`; fails when the flag is absent or repeated."""
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(
    "spec, expected",
    [
        (ServerSpec("embedded", "ddtree", tp=4, budget=16), "ddtree-tp4-b16"),
        (ServerSpec("sglang", "dflash", tp=1), "dflash-tp1"),
        (ServerSpec("embedded", "ar"), "ar-tp1"),
    ],
)
def test_spec_id(spec, expected):
    assert spec.id == expected == str(spec)


def test_specs_are_hashable_values_and_extra_args_become_a_tuple():
    a = ServerSpec("embedded", "ddtree", budget=8, extra_args=["--fault-hang"])
    b = ServerSpec("embedded", "ddtree", budget=8, extra_args=("--fault-hang",))
    assert a == b and hash(a) == hash(b) and a.extra_args == ("--fault-hang",)
    assert a != ServerSpec("embedded", "ddtree", budget=8)  # same id, different server
    with pytest.raises(AttributeError):
        a.tp = 2


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(backend="vllm", method="ar"), "backend 'vllm'"),
        (dict(backend="embedded", method="eagle"), "method 'eagle'"),
        (dict(backend="embedded", method="ddtree"), "needs a budget"),
        (dict(backend="embedded", method="ddtree", budget=0), "needs a budget"),
        (dict(backend="embedded", method="dflash", budget=8), "only ddtree takes a budget"),
        (dict(backend="embedded", method="ar", tp=0), "tp=0"),
    ],
)
def test_spec_rejects_bad_input_with_a_usage_error(kwargs, words):
    with pytest.raises(SpecdecUsageError, match=words):
        ServerSpec(**kwargs)


def test_sglang_argv_for_ddtree_default_preset():
    argv = build_sglang_argv(sg("ddtree", tp=4, budget=16, seed=7, extra_args=("--mem-fraction-static", "0.8")), 31234,
                             python="/py")
    assert argv[:3] == ["/py", "-m", "sglang.launch_server"]
    assert flag(argv, "--model-path") == "Qwen/Qwen3-8B"
    assert flag(argv, "--speculative-draft-model-path") == "z-lab/Qwen3-8B-DFlash"
    assert flag(argv, "--tp-size") == "4"
    assert flag(argv, "--speculative-algorithm") == "DDTREE"
    assert flag(argv, "--speculative-ddtree-budget") == "16"
    assert flag(argv, "--host") == "127.0.0.1" and flag(argv, "--port") == "31234"
    assert flag(argv, "--log-level") == "info" and flag(argv, "--random-seed") == "7"
    assert "--enable-metrics" in argv
    assert argv[-2:] == ["--mem-fraction-static", "0.8"]  # user args last, so they win


def test_sglang_argv_fork_preset_uses_num_draft_tokens_budget_plus_one():
    argv = build_sglang_argv(sg("ddtree", budget=15), 1, method_flags=METHOD_FLAG_PRESETS["num-draft-tokens"])
    assert flag(argv, "--speculative-num-draft-tokens") == "16"
    assert "--speculative-ddtree-budget" not in argv


def test_sglang_argv_dflash_and_ar():
    dflash = build_sglang_argv(sg("dflash"), 1)
    assert flag(dflash, "--speculative-algorithm") == "DFLASH"
    ar = build_sglang_argv(sg("ar", draft_model=None), 1)
    assert not [a for a in ar if a.startswith("--speculative")]


def test_sglang_argv_model_overrides_and_missing_models():
    argv = build_sglang_argv(sg("dflash"), 1, model_path="/dev/shm/m", draft_model_path="/dev/shm/d")
    assert flag(argv, "--model-path") == "/dev/shm/m"
    assert flag(argv, "--speculative-draft-model-path") == "/dev/shm/d"
    with pytest.raises(SpecdecUsageError, match="needs a target model"):
        build_sglang_argv(sg("ar", model=None), 1)
    with pytest.raises(SpecdecUsageError, match="needs a draft model"):
        build_sglang_argv(sg("dflash", draft_model=None), 1)


def test_method_flags_from_config():
    assert method_flags_from_config("num-draft-tokens", source="x") is METHOD_FLAG_PRESETS["num-draft-tokens"]
    custom = method_flags_from_config({"ddtree": ["--speculative-algorithm", "TREE", "--w", "{num_draft_tokens}"]},
                                      source="pyproject.toml [tool.specdec.sglang] method_flags")
    assert custom["dflash"] == ("--speculative-algorithm", "DFLASH")  # merged over the default
    argv = build_sglang_argv(sg("ddtree", budget=8), 1, method_flags=custom)
    assert flag(argv, "--w") == "9"
    with pytest.raises(SpecdecUsageError, match="preset 'nope'"):
        method_flags_from_config("nope", source="x")
    with pytest.raises(SpecdecUsageError, match=r"x\.ddtree: placeholder \{depth\}"):
        method_flags_from_config({"ddtree": ["--d", "{depth}"]}, source="x")
    with pytest.raises(SpecdecUsageError, match="unknown method 'medusa'"):
        method_flags_from_config({"medusa": []}, source="x")
    with pytest.raises(SpecdecUsageError, match=r"^x\.dflash: placeholder \{budget\} in '\{budget\}' has no "
                                                r"value: method dflash takes no budget"):
        method_flags_from_config({"dflash": ["--b", "{budget}"]}, source="x")
    with pytest.raises(SpecdecUsageError, match="needs budget"):  # a mapping given directly
        build_sglang_argv(sg("dflash"), 1, method_flags={"dflash": ("--b", "{budget}")})


@pytest.mark.parametrize("templates, message", [
    (5, r"^S\.ddtree: 5 is not a list of strings; give one, e\.g\. \["),
    ({"a": "b"}, r"^S\.ddtree: \{'a': 'b'\} is not a list of strings"),
    ("--flag", r"^S\.ddtree: '--flag' is not a list of strings"),
    (["--budget", 8], r"^S\.ddtree: \['--budget', 8\] is not a list of strings"),
    (["--budget", "{budget"], r"^S\.ddtree: '\{budget' is not a valid flag template \(expected '\}' "
                              r"before end of string\); write a placeholder as \{budget\}"),
    (["x}"], r"^S\.ddtree: 'x\}' is not a valid flag template \(Single '\}'"),
    (["{budget!z}"], r"^S\.ddtree: '\{budget!z\}' is not a valid flag template \(Unknown conversion"),
    (["{budget:{depth}}"], r"^S\.ddtree: .* \(unknown placeholder \{depth\}\)"),
])
def test_method_flags_from_config_names_method_and_fix_for_bad_templates(templates, message):
    with pytest.raises(SpecdecUsageError, match=message):
        method_flags_from_config({"ddtree": templates}, source="S")


def test_embedded_argv():
    argv = build_embedded_argv(ServerSpec("embedded", "ddtree", budget=12, seed=3, context_length=2048,
                                 extra_args=("--fault-crash-after", "2")), 4242)
    assert argv[:3] == [sys.executable, "-m", "pytest_specdec.engine"]
    assert flag(argv, "--port") == "4242" and flag(argv, "--host") == "127.0.0.1"
    assert flag(argv, "--method") == "ddtree" and flag(argv, "--budget") == "12"
    assert flag(argv, "--seed") == "3" and flag(argv, "--context-length") == "2048"
    assert argv[-2:] == ["--fault-crash-after", "2"]
    assert "--budget" not in build_embedded_argv(ServerSpec("embedded", "dflash"), 1)
    assert "--model-path" not in build_embedded_argv(ServerSpec("embedded", "ar", model="Qwen/Qwen3-8B"), 1)


def test_log_watcher_reads_incrementally(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("[t] loading\n[t] The server is fired up and ready to roll!\n")
    w = LogWatcher(log)
    f = w.scan()
    assert f.ready and f.fatal_line is None and not f.address_in_use
    with log.open("a") as fh:
        fh.write("[2026 TP0] Scheduler hit an exception: Traceback\n")
        fh.write("RuntimeError: CUDA error: an illegal instruction was encountered\n")
    f = w.scan()
    # The specific line wins over the generic one logged before it.
    assert f.fatal_line == "RuntimeError: CUDA error: an illegal instruction was encountered"
    assert fatal_cause("[2026 TP0] RuntimeError: CUDA error: an illegal instruction was encountered") == (
        "CUDA error: an illegal instruction was encountered"
    )


def test_log_watcher_sees_a_partial_last_line_and_bind_failures(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 1): Address already in use")
    assert LogWatcher(log).scan().address_in_use
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert LogWatcher(log).scan().fatal_line.startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_tail_and_describe_exit(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(log, 3) == "line 97\nline 98\nline 99"
    assert tail(tmp_path / "absent.log") == ""
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-9) == "was killed by SIGKILL"


def test_server_error_message_and_pickle(tmp_path):
    e = ServerError("ddtree-tp1-b8", "died", "CUDA error: an illegal instruction was encountered",
                    log_path=tmp_path / "x.log", tail_text="a\nb")
    assert str(e).startswith(
        f"server ddtree-tp1-b8 died: CUDA error: an illegal instruction was encountered (log: {tmp_path / 'x.log'}; last lines:"
    )
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.reason, e2.cause, e2.log_path, e2.tail, str(e2)) == (e.reason, e.cause, e.log_path, e.tail, str(e))


def test_the_exception_line_beats_the_traceback_source_echo(tmp_path):
    log = tmp_path / "s.log"
    log.write_text(
        "[t] Initialization failed. warmup error: Traceback (most recent call last):\n"
        '  File "server.py", line 105, in _warmup\n'
        '    raise RuntimeError("warm-up request failed: CUDA out of memory. Tried to allocate 2.00 GiB "\n'
        "RuntimeError: warm-up request failed: CUDA out of memory. Tried to allocate 2.00 GiB (injected)\n"
    )
    line = LogWatcher(log).scan().fatal_line
    assert fatal_cause(line) == "CUDA out of memory. Tried to allocate 2.00 GiB (injected)"


def test_a_coloured_traceback_gives_the_same_cause_and_tail_as_a_plain_one(tmp_path):
    # as Python 3.13 writes a traceback to a file with FORCE_COLOR or PYTHON_COLORS=1 in its environment
    log = tmp_path / "s.log"
    log.write_text(
        "[t TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File \x1b[35m"configs.py"\x1b[0m, line \x1b[35m79\x1b[0m, in \x1b[35mverify_config\x1b[0m\n'
        '    \x1b[1;31mraise ValueError(f"head dim {head_dim} is not supported")\x1b[0m\n'
        "\x1b[1;35mValueError\x1b[0m: \x1b[35mhead dim 32 is not supported\x1b[0m\n"
        "\x1b[1;35msglang serve: error:\x1b[0m unrecognized arguments: --flag 8\n"
    )
    finding = LogWatcher(log).scan()
    assert finding.cause == "Scheduler hit an exception: ValueError: head dim 32 is not supported"
    assert finding.usage_error == "sglang serve: error: unrecognized arguments: --flag 8"
    assert "\x1b" not in tail(log) and tail(log).endswith("ValueError: head dim 32 is not supported\n"
                                                          "sglang serve: error: unrecognized arguments: --flag 8")


def test_a_generic_line_that_opens_a_traceback_takes_the_exception_as_its_cause(tmp_path):
    log = tmp_path / "s.log"
    log.write_text(
        "[t TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "configs.py", line 79, in verify_config\n'
        '    raise ValueError(f"head dim {head_dim} is not supported")\n'
        "ValueError: head dim 32 is not supported; use one of [64, 128, 256]\n"
        "\n[t] Received sigquit from a child process. It usually means the child failed.\n"
    )
    assert LogWatcher(log).scan().cause == (
        "Scheduler hit an exception: ValueError: head dim 32 is not supported; use one of [64, 128, 256]"
    )


def test_a_hang_signature_is_a_hang_and_a_crash_signature_is_not():
    assert is_hang_signature("[t TP0] Health check failed. Server may be stuck")
    assert is_hang_signature("[t] Watchdog caught collective operation timeout: WorkNCCL(...)")
    assert not is_hang_signature("RuntimeError: CUDA error: an illegal instruction was encountered")
    assert not is_hang_signature("[t] loading weights")


def test_the_plugins_command_line_in_a_log_is_not_the_servers_words(tmp_path):
    """The plugin writes the server's command first; an argument that reads like a fatal line is
    no cause."""
    log = tmp_path / "s.log"
    log.write_text(f"{COMMAND_LINE_PREFIX}python -m sglang.launch_server --served-model-name 'Health check failed'\n"
                   "[t] The server is fired up and ready to roll!\n")
    assert LogWatcher(log).scan().fatal_line is None


def test_a_line_written_in_two_pieces_is_read_whole(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("RuntimeError: CUDA error: an illegal")
    watcher = LogWatcher(log)
    assert watcher.scan().fatal_line is None
    with log.open("a") as fh:
        fh.write(" instruction was encountered\n")
    assert watcher.scan().fatal_line == "RuntimeError: CUDA error: an illegal instruction was encountered"


def test_a_clean_exit_is_no_kill_and_only_a_sigkill_points_at_the_oom_killer():
    assert describe_exit(0) == "exited with code 0"
    assert "out-of-memory killer" in unexplained_kill(-signal.SIGKILL)
    assert unexplained_kill(signal.SIGKILL) == unexplained_kill(1) == unexplained_kill(None) == ""


def test_the_exception_that_closes_the_traceback_is_the_cause_not_a_later_one(tmp_path):
    """A crash's shutdown logs more exceptions (a chained one, a KeyboardInterrupt); the first
    after the fatal line is what closed its traceback."""
    log = tmp_path / "s.log"
    log.write_text(
        "[t TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "configs.py", line 79, in verify_config\n'
        "ValueError: head dim 32 is not supported\n"
        "During handling of the above exception, another exception occurred:\n"
        "KeyboardInterrupt: shutting down\n"
    )
    assert LogWatcher(log).scan().cause == "Scheduler hit an exception: ValueError: head dim 32 is not supported"


def test_a_log_that_cannot_be_read_has_an_empty_tail(tmp_path):
    """The tail only adds to a failure message: a log path that is a folder must not replace it."""
    assert tail(tmp_path) == ""


def test_a_more_specific_fatal_line_takes_its_own_tracebacks_exception(tmp_path):
    """The exception line belongs to the fatal line chosen: a generic traceback's exception, logged
    before a more specific one opened its own, named the wrong error as its cause."""
    log = tmp_path / "s.log"
    log.write_text(
        "[t TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "ValueError: head dim 32 is not supported\n"
        "[t TP0] Capture cuda graph failed: Traceback (most recent call last):\n"
        '  File "cuda_graph_runner.py", line 9, in capture\n'
        "RuntimeError: graph capture ran out of streams\n"
    )
    assert LogWatcher(log).scan().cause == "Capture cuda graph failed: RuntimeError: graph capture ran out of streams"


def test_a_more_specific_fatal_line_still_being_written_takes_no_earlier_exception(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("[t TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                   "ValueError: head dim 32 is not supported\n"
                   "[t TP0] Capture cuda graph failed: Traceback (most recent call last):")
    assert LogWatcher(log).scan().cause == "Capture cuda graph failed: Traceback (most recent call last):"
