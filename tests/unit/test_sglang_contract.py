"""Contract: the argv we build for SGLang parses with SGLang's own parser (0.5.23).

For every entry of the default GPU matrix (methods dflash / ddtree / ar x tp 1, 4, 8 x the ddtree
budgets), `ServerArgs.add_cli_args` must accept our command line and read back the values we meant.

DDTree is not upstream. `--speculative-algorithm` is a free string there (plugins register names),
so `DDTREE` parses as is; the flags differ by preset:
- `num-draft-tokens` (fork): only upstream flags, so it is checked against the unmodified parser;
- `ddtree-budget` (the open pull request): adds `--speculative-ddtree-budget`, which upstream
  rejects. We check it against upstream's parser plus that one flag registered the way the pull
  request declares it (an optional int), and separately assert that upstream alone still rejects
  it -- when upstream merges DDTree that test fails and the extra registration should go.

SGLang comes from its reference copy (the `sglang_reference` fixture: scripts/setup-venv.sh
installs sglang==0.5.23 and its light imports into a directory of their own).
"""

from __future__ import annotations

import argparse
import importlib

import pytest

from pytest_specdec.servers import METHOD_FLAG_PRESETS, ServerSpec
from pytest_specdec.servers.sglang import build_sglang_argv



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
