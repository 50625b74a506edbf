"""Configuration: every class of mistake stops the run at start with one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specdec import config
from pytest_specdec.errors import SpecdecUsageError


@pytest.mark.parametrize("toml, message", [
    ("[tool.specdec]\nrecipes = [8]\n",
     "pyproject.toml [tool.specdec]: unknown key 'recipes'; known keys: allow_shared, arch, artifacts,*"),
    # every wrong type is told how to write the key
    ("[tool.specdec]\nmin_accept_length = '1.5'\n",
     "pyproject.toml [tool.specdec] key 'min_accept_length': '1.5' must be a number; write it without quotes: "
     "min_accept_length = 1.5"),
    ("[tool.specdec.engine]\nseed = 'x'\n",
     "pyproject.toml [tool.specdec.engine] key 'seed': 'x' must be a whole number; write a whole number without "
     "quotes, e.g. seed = 0"),
    ("[tool.specdec]\nworkloads = 3\n",
     "pyproject.toml [tool.specdec] key 'workloads': 3 must be a list of tables; give each workload an entry of its "
     "own headed [[tool.specdec.workloads]]"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nmethod = [1]\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'method': [1] must be a list of strings, e.g. method = [\"ddtree\"]"),
    ("[tool.specdec.sglang]\nmethod_flags = 3\n",
     "pyproject.toml [tool.specdec.sglang] key 'method_flags': 3 must be a preset's name or a table; write e.g. "
     "method_flags = \"ddtree-budget\" (ddtree-budget, num-draft-tokens), or method = [argv...] under a "
     "[tool.specdec.sglang.method_flags] header"),
    ("[tool.specdec.engine]\ndraft_agreement = 2\n",
     "pyproject.toml [tool.specdec.engine] key 'draft_agreement': 2 must lie in [0, 1], a probability per drafted "
     "position; e.g. draft_agreement = 0.9"),
    # a misspelt key gets the did-you-mean every name does (suggest), case aside
    ("[tool.specdec]\nDRAFT_MODEL = 'x'\n", "pyproject.toml [tool.specdec]: unknown key 'DRAFT_MODEL'; did you mean "
                                            "'draft_model'?"),
    ("[tool.specdec.engine]\nSEED = 1\n", "pyproject.toml [tool.specdec.engine]: unknown key 'SEED'; did you mean 'seed'?"),
    # a matrix's key at the top is sent to the matrix table it belongs in
    ("[tool.specdec]\nmethods = ['dflash', 'ddtree']\n",
     "pyproject.toml [tool.specdec] key 'methods': ['dflash', 'ddtree'] belongs in a matrix table, one per hardware "
     "family ([tool.specdec.matrix.<family>], family one of blackwell, hopper, ada, ampere, cpu); move it there, "
     "e.g. [tool.specdec.matrix.cpu] methods = [\"dflash\", \"ddtree\"]"),
    ("[tool.specdec]\nbudgets = [8]\n",
     "pyproject.toml [tool.specdec] key 'budgets': [8] belongs in a matrix table, spelt budget, one per hardware "
     "family (*); move it there, e.g. [tool.specdec.matrix.cpu] budget = [8]"),
    ("[tool.specdec]\ntp = [1, 4]\nmethods = ['ar']\n",
     "pyproject.toml [tool.specdec] key 'methods': ['ar'] belongs in a matrix table, *; move tp there too (at the "
     "top, tp only filters the matrix's sizes)"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ddtree']\nbudgets = [8]\n",
     "pyproject.toml [tool.specdec.matrix.cpu]: unknown key 'budgets'; did you mean 'budget'?"),
    ("[tool.specdec]\nmodel = 7\n",
     "pyproject.toml [tool.specdec] key 'model': 7 is a number, not a string; write it in quotes: model = \"7\""),
    # a string key given another type names what was given and how TOML spells it as a string
    ("[tool.specdec]\ndraft_model = 3\n",
     "pyproject.toml [tool.specdec] key 'draft_model': 3 is a number, not a string; write it in quotes: "
     "draft_model = \"3\""),
    ("[tool.specdec]\nmodel_cache = true\n",
     "pyproject.toml [tool.specdec] key 'model_cache': true is a boolean, not a string; write it in quotes: "
     "model_cache = \"true\""),
    ("[tool.specdec]\ndraft_model = ['z-lab/d']\n",
     "pyproject.toml [tool.specdec] key 'draft_model': ['z-lab/d'] is a list, not a string; give the one string, "
     "not a list: draft_model = \"z-lab/d\""),
    ("[tool.specdec]\nmodel = {path = 'm'}\n",
     "pyproject.toml [tool.specdec] key 'model': {'path': 'm'} is a TOML table, not a string; write one in quotes, "
     "e.g. model = \"Qwen/Qwen3.6-27B\""),
    ("[[tool.specdec.workloads]]\nprompts = 3\n",
     "pyproject.toml [tool.specdec.workloads #1] key 'prompts': 3 is a number, not a string; prompts takes a "
     "built-in set (chat, code, math) or the path of a JSONL file, e.g. prompts = \"chat\""),
    ("[tool.specdec.engine]\ndevice = ['cuda', 'cpu']\n",
     "pyproject.toml [tool.specdec.engine] key 'device': ['cuda', 'cpu'] is a list, not a string; device takes "
     "one of auto, cpu, cuda, e.g. device = \"cuda\""),
    # TOML's names for types and values, not Python's
    ("[[tool.specdec.workloads]]\ntruncate = 'yes'\n", "pyproject.toml [tool.specdec.workloads #1] key 'truncate': 'yes' must be true or false; write truncate = true or truncate = false"),
    ("[tool.specdec]\nmin_accept_length = true\n",
     "pyproject.toml [tool.specdec] key 'min_accept_length': true must be a number; write a number without "
     "quotes, e.g. min_accept_length = 1.5"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = ['sm_120']\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'arch': ['sm_120'] is a list, not a string; give the one string, not a "
     "list: arch = \"sm_120\""),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ar']\ntp = '1'\n",
     "pyproject.toml [tool.specdec.matrix.cpu] key 'tp': '1' must be a list of whole numbers, e.g. tp = [1, 4, 8]"),
    ("[tool.specdec]\nmatrix = {}\n",
     "pyproject.toml [tool.specdec] key 'matrix': {} is empty; add e.g. [tool.specdec.matrix.cpu]*"),
    ("[tool.specdec.matrix.cpu]\nmethods = []\n",
     "pyproject.toml [tool.specdec.matrix.cpu] key 'methods': [] is empty; list at least one of ar, dflash,*"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ddtree']\nbudget = [0, 8]\n",
     "*key 'budget': 0 is impossible; a tree budget counts draft nodes and must be at least 1"),
    ("[tool.specdec.matrix.hopper]\nmethods = ['dflash']\ntp = [1, 3]\n",
     "*[tool.specdec.matrix.hopper] key 'tp': 3 is not a power of two; tensor-parallel sizes are 1, 2, 4*"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['medusa']\n",
     "*key 'methods': unknown method 'medusa'; use one of ar, dflash, ddtree"),
    # a misspelt method is answered as a misspelt family is
    ("[tool.specdec.matrix.cpu]\nmethods = ['ddtre']\nbudget = [8]\n",
     "pyproject.toml [tool.specdec.matrix.cpu] key 'methods': unknown method 'ddtre'; did you mean 'ddtree'?"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['DFlash']\n", "*key 'methods': unknown method 'DFlash'; did you mean 'dflash'?"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nmethod = ['dflsh']\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'method': unknown method 'dflsh'; did you mean 'dflash'?"),
    ("[tool.specdec.sglang]\nmethod_flags = {ddtre = ['--x']}\n",
     "pyproject.toml [tool.specdec.sglang] key 'method_flags': unknown method 'ddtre'; did you mean 'ddtree'?"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ddtree']\n",
     "*key 'budget': is missing or empty but methods include ddtree; list budgets*"),
    ("[tool.specdec.matrix.tpu]\nmethods = ['ar']\n",
     "*key 'matrix.tpu': 'tpu' is an unknown hardware family; use one of blackwell, hopper, ada, ampere, cpu"),
    # a misspelt family is answered as a misspelt key is
    ("[tool.specdec.matrix.blackwel]\nmethods = ['ar']\n",
     "pyproject.toml [tool.specdec] key 'matrix.blackwel': 'blackwel' is an unknown hardware family; did you mean 'blackwell'?"),
    ("[tool.specdec.matrix.Hopper]\nmethods = ['ar']\n", "*key 'matrix.Hopper': 'Hopper' is an unknown hardware family; did you mean 'hopper'?"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nfamily = 'hoper'\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'family': 'hoper' is unknown; did you mean 'hopper'?"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nfamily = 'tpu'\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'family': 'tpu' is unknown; use one of blackwell, hopper, ada, ampere, cpu"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nfamily = 'cpus'\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'family': 'cpus' is unknown; did you mean 'cpu'?"),
    # a family where an architecture is wanted, and the reverse, are named as such
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 'blackwell'\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'arch': 'blackwell' is a hardware family, not an architecture; give one of "
     "its architectures: sm_100, sm_101, sm_103, sm_110, sm_120, sm_121; or write family = 'blackwell' to match "
     "them all"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 'hoper'\n",
     "*key 'arch': 'hoper' is not an architecture, but close to the hardware family 'hopper'; give one of its "
     "architectures: sm_90; or write family = 'hopper' to match them all"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 'cpu'\n",
     "*key 'arch': 'cpu' is a hardware family, not an architecture; a host without a GPU has no architecture: leave "
     "the arch out"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nfamily = 'sm_90'\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'family': 'sm_90' is an architecture, not a family; write family = 'hopper', "
     "or arch = 'sm_90' for that architecture only"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nbackend = ['embeded']\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'backend': 'embeded' is unknown; did you mean 'embedded'?"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nbackend = ['vllm']\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'backend': 'vllm' is unknown; use one of embedded, sglang"),
    ("[tool.specdec.matrix.sm_120]\nmethods = ['ar']\n",
     "pyproject.toml [tool.specdec] key 'matrix.sm_120': sm_120 is an architecture, not a hardware family; a matrix is "
     "per family: [tool.specdec.matrix.blackwell]"),
    ("[[tool.specdec.known_issues]]\narch = 'sm_120'\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'reason': missing; say what breaks*"),
    ("[[tool.specdec.known_issues]]\narch = 'gfx942'\nreason = 'x'\n",
     "*[tool.specdec.known_issues #1] key 'arch': 'gfx942' is not an arch; use e.g. sm_120*"),
    ("[[tool.specdec.known_issues]]\nbudget = [-1]\nreason = 'x'\n",
     "*[tool.specdec.known_issues #1] key 'budget': -1 is impossible*"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nmethods = ['ddtree']\n",
     "*[tool.specdec.known_issues #1]: unknown key 'methods'; did you mean 'method'?"),
    # entries that could never match a configuration
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 'sm_120'\nfamily = 'hopper'\n",
     "*[tool.specdec.known_issues #1] key 'family': 'hopper' contradicts arch = 'sm_120', which is blackwell; "
     "give one of them*"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nmethod = ['ar', 'dflash']\nbudget = [8]\n",
     "*[tool.specdec.known_issues #1] key 'budget': [8] is given, but ar, dflash take no budget (a tree budget is ddtree's); remove the "
     "budget or add ddtree to method*"),
    # a repeated value is refused as in a matrix: a slip, perhaps for another value
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nmethod = ['ddtree', 'ddtree']\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'method': lists 'ddtree' more than once; list each once"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\n[[tool.specdec.known_issues]]\nreason = 'y'\ntp = [1, 1]\n",
     "pyproject.toml [tool.specdec.known_issues #2] key 'tp': lists 1 more than once; list each once"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nbudget = [8, 16, 8]\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'budget': lists 8 more than once; list each once"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nbackend = ['sglang', 'sglang']\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'backend': lists 'sglang' more than once; list each once"),
    # an empty list matches no configuration: the entry would never apply
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nmethod = []\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'method': [] is empty, so the entry matches nothing; list at least one "
     "value, or remove method to match any"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\ntp = []\n", "pyproject.toml [tool.specdec.known_issues #1] key 'tp': [] is empty*"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nbudget = []\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'budget': [] is empty*"),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nbackend = []\n",
     "pyproject.toml [tool.specdec.known_issues #1] key 'backend': [] is empty*"),
    ("[[tool.specdec.known_issues]]\nreason = '  '\n", "pyproject.toml [tool.specdec.known_issues #1] key 'reason': '  ' is blank; say what breaks*"),
    ("[[tool.specdec.workloads]]\nprompts = 'missing.jsonl'\n",
     "*[tool.specdec.workloads #1] key 'prompts': 'missing.jsonl' is neither a built-in set (chat, code, math) nor a *"),
    # an empty path is the project root, a folder: the fix is a set or a file, not "fix the path"
    ("[[tool.specdec.workloads]]\nprompts = ''\n",
     "pyproject.toml [tool.specdec.workloads #1] key 'prompts': '' is empty; name a built-in set (chat, code, math) "
     "or a JSONL file, e.g. prompts = \"chat\""),
    ("[[tool.specdec.workloads]]\nname = 'mine'\nprompts = ' '\n",
     "pyproject.toml [tool.specdec.workloads #1] key 'prompts': ' ' is blank; name a built-in set*"),
    ("[[tool.specdec.workloads]]\nprompts = 'maths'\n",
     "pyproject.toml [tool.specdec.workloads #1] key 'prompts': 'maths' is neither a built-in set (chat, code, math) nor a JSONL "
     "file; did you mean the built-in set 'math'?"),
    ("[[tool.specdec.workloads]]\nprompts = 'poetry'\n", "*key 'prompts': 'poetry' is neither a built-in set * nor a "
                                                          "JSONL file; no file at */poetry (a relative path is the "
                                                          "project root's): fix the path"),
    # a name the file system refuses to look up (too long) is a path to fix, not an internal error
    ("[[tool.specdec.workloads]]\nprompts = '" + "p" * 300 + ".jsonl'\n",
     "*[tool.specdec.workloads #1] key 'prompts': 'ppp*.jsonl' cannot be looked up (File name too long); "
     "fix the path"),
    ("[tool.specdec.metrics]\nkv_hit_rate = 'higer'\n",
     "pyproject.toml [tool.specdec.metrics] key 'kv_hit_rate': 'higer' is not a direction; did you mean 'higher'?"),
    ("[[tool.specdec.workloads]]\nconcurrency = 0\n",
     "*[tool.specdec.workloads #1] key 'concurrency': 0 must be at least 1"),
    ("[[tool.specdec.workloads]]\nname = ''\n",
     "pyproject.toml [tool.specdec.workloads #1] key 'name': '' is empty; give the workload a name, e.g. name = \"chat\""),
    ("[[tool.specdec.workloads]]\nnum_prompts = '3'\n",
     "pyproject.toml [tool.specdec.workloads #1] key 'num_prompts': '3' must be a whole number; write it without quotes: num_prompts = 3"),
    ("[tool.specdec]\nengine = 3\n",
     "pyproject.toml [tool.specdec] key 'engine': 3 must be a TOML table; write its keys under a "
     "[tool.specdec.engine] header"),
    ("[tool.specdec]\nmin_accept_length = 'x'\n",
     "pyproject.toml [tool.specdec] key 'min_accept_length': 'x' must be a number; write a number without "
     "quotes, e.g. min_accept_length = 1.5"),
    ("[tool.specdec]\nknown_issues = [3]\n",
     "pyproject.toml [tool.specdec.known_issues #1]: 3 must be a table, not a whole number; write its keys under a "
     "[[tool.specdec.known_issues]] header"),
    ("[tool.specdec.matrix]\ncpu = 'ar'\n", "pyproject.toml [tool.specdec.matrix.cpu]: 'ar' must be a table, not a string; write its keys under a "
     "[tool.specdec.matrix.cpu] header"),
    ("[tool.specdec.tolerances]\noutput_tok_s = 'lots'\n",
     "*[tool.specdec.tolerances] key 'output_tok_s': tolerance 'lots' for 'output_tok_s' is not a number or "
     "percentage*"),
    ("[tool.specdec.tolerances]\ntok_s = '5%'\n",
     "*[tool.specdec.tolerances]: unknown metric 'tok_s'; valid names: accept_length, accept_rate*"),
    ("[tool.specdec.engine]\ndraft_agreement = 1.5\n",
     "*[tool.specdec.engine] key 'draft_agreement': 1.5 must lie in [0, 1]"),
    ("[tool.specdec.engine]\nblock_size = 1\n",
     "*[tool.specdec.engine] key 'block_size': 1 must be at least 2 (the root and at least one draft "
     "position)"),
    ("[tool.specdec.engine]\nnum_layers = 0\n",
     "*[tool.specdec.engine] key 'num_layers': 0 must be at least 1, or leave it out*"),
    ("[tool.specdec.engine]\ndevice = 'gpu'\n",
     "*[tool.specdec.engine] key 'device': 'gpu' is unknown; use one of auto, cpu, cuda"),
    # a misspelt name of a known few is answered with the one it most likely stands for
    ("[tool.specdec.engine]\ndevice = 'cuda:0'\n",
     "pyproject.toml [tool.specdec.engine] key 'device': 'cuda:0' is unknown; did you mean 'cuda'?"),
    ("[tool.specdec.engine]\nmodel_preset = 'tiny-hybird'\n",
     "pyproject.toml [tool.specdec.engine] key 'model_preset': 'tiny-hybird' is unknown; did you mean 'tiny-hybrid'?"),
    ("[tool.specdec.engine]\nmodel_preset = 'llama'\n",
     "*key 'model_preset': 'llama' is unknown; use one of tiny, 8b-layer, tiny-hybrid, 27b-hybrid-layers"),
    ("[tool.specdec.sglang]\nmethod_flags = 'ddtree-budgt'\n",
     "pyproject.toml [tool.specdec.sglang] key 'method_flags': unknown SGLang method-flag preset 'ddtree-budgt'; did "
     "you mean 'ddtree-budget'?"),
    ("[tool.specdec.sglang.method_flags]\nddtree = ['--speculative-ddtree-budget', '{budgte}']\n",
     "pyproject.toml [tool.specdec.sglang] key 'method_flags.ddtree': placeholder {budgte} in '{budgte}' is unknown; did "
     "you mean {budget}?"),
    ("[tool.specdec.engine]\nextra_args = ['--context-lenght', '256']\n",
     "*[tool.specdec.engine] key 'extra_args': unrecognized arguments: --context-lenght 256; "
     "see python -m pytest_specdec.engine --help"),
    ("[tool.specdec.engine]\nextra_args = ['--fault-lossy', 'some']\n",
     "*[tool.specdec.engine] key 'extra_args': argument --fault-lossy: invalid float value: 'some'*"),
    ("[tool.specdec.engine]\nextra_args = ['--context-length', '0']\n",
     "*[tool.specdec.engine] key 'extra_args': --context-length must be >= 1; "
     "see python -m pytest_specdec.engine --help"),
    ("[tool.specdec.engine]\nextra_args = ['--fault-lossy', '1.5']\n",
     "*[tool.specdec.engine] key 'extra_args': --fault-lossy must be a probability in [0, 1], got 1.5*"),
    ("[tool.specdec.engine]\nextra_args = ['--warmup-batch-sizes', '9']\n",
     "*[tool.specdec.engine] key 'extra_args': --warmup-batch-sizes 9: a batch size must be in 1..8 (--max-batch)*"),
    ("[tool.specdec.engine]\nextra_args = ['--recurrent-tree', 'chain']\n",
     "*[tool.specdec.engine] key 'extra_args': --recurrent-tree chain needs a hybrid model: --model-preset tiny*"),
    ("[tool.specdec.sglang]\nmethod_flags = 'eagle-ish'\n",
     "*[tool.specdec.sglang] key 'method_flags': unknown SGLang method-flag preset 'eagle-ish'; use one of "
     "ddtree-budget, num-draft-tokens or a table method = [argv...]"),
    ("[tool.specdec.sglang]\nmethod_flags = {ddtree = 5}\n",
     "*[tool.specdec.sglang] key 'method_flags.ddtree': 5 is not a list of strings; give one, e.g.*"),
    # a budget for a method that takes none had no value until its server was built, hours in
    ("[tool.specdec.sglang.method_flags]\ndflash = ['--speculative-num-draft-tokens', '{num_draft_tokens}']\n",
     "*[tool.specdec.sglang] key 'method_flags.dflash': placeholder {num_draft_tokens} in '{num_draft_tokens}' has no "
     "value: method dflash takes no budget; write the number itself, or use {tp}"),
    ("[tool.specdec.sglang]\nmethod_flags = {ddtree = ['--budget', '{budget']}\n",
     "*[tool.specdec.sglang] key 'method_flags.ddtree': '{budget' is not a valid flag template (*); "
     "write a placeholder as {budget}*"),
    ("[tool.specdec]\nmin_accept_length = 0.5\n",
     "*key 'min_accept_length': 0.5 is below 1*"),
    ("[tool.specdec]\nstartup_timeout = 'soon'\n",
     "pyproject.toml [tool.specdec] key 'startup_timeout': 'soon' is not a number; "
     "--specdec-startup-timeout takes*"),
    # tp as TOML writes it is quoted so, not as the command line's '1,1' the user never wrote here
    ("[tool.specdec]\ntp = [1, 1]\n",
     "pyproject.toml [tool.specdec] key 'tp': [1, 1] lists 1 more than once; list each size once: tp = [1]; "
     "--specdec-tp takes*"),
    ("[tool.specdec]\ntp = []\n",
     "pyproject.toml [tool.specdec] key 'tp': [] is empty; list at least one size, e.g. tp = [1, 4]*"),
    ("[tool.specdec]\ntp = [1, 6]\n",
     "pyproject.toml [tool.specdec] key 'tp': [1, 6]: 6 is not a power of two*"),
    ("[tool.specdec]\ntp = ['1', '4']\n",
     "pyproject.toml [tool.specdec] key 'tp': ['1', '4'] must be a list of whole numbers, e.g. tp = [1, 4]*"),
    # an option key of another TOML type is told the type it takes, written as TOML, not only its help
    ("[tool.specdec]\nbackend = ['sglang']\n",
     "pyproject.toml [tool.specdec] key 'backend': ['sglang'] is a list, not a string; give the one string, not a "
     "list: backend = \"sglang\"; --specdec-backend takes: *"),
    ("[tool.specdec]\nreport = 3\n",
     "pyproject.toml [tool.specdec] key 'report': 3 is a number, not a string; write it in quotes: report = \"3\"; "
     "--specdec-report takes: *"),
    ("[tool.specdec]\nsave_baseline = 1\n",
     "pyproject.toml [tool.specdec] key 'save_baseline': 1 must be true or false, e.g. save_baseline = true*"),
    ("[tool.specdec]\nrestart_on_crash = true\n",
     "pyproject.toml [tool.specdec] key 'restart_on_crash': true must be a whole number, e.g. "
     "restart_on_crash = 1*"),
    ("[tool.specdec]\nstartup_timeout = false\n",
     "pyproject.toml [tool.specdec] key 'startup_timeout': false must be a number of seconds, e.g. "
     "startup_timeout = 600*"),
    ("[tool.specdec]\ntp = true\n",
     "pyproject.toml [tool.specdec] key 'tp': true must be a list of tensor-parallel sizes, e.g. tp = [1, 4]*"),
    # an empty path is the project folder itself: report = "" wrote no report, artifacts = "" filled the project
    ("[tool.specdec]\nartifacts = ''\n",
     "pyproject.toml [tool.specdec] key 'artifacts': '' is empty; give one, e.g. artifacts = \".specdec/artifacts\", "
     "or remove the key"),
    ("[tool.specdec]\nbaseline_dir = ' '\n", "pyproject.toml [tool.specdec] key 'baseline_dir': ' ' is empty; *"),
    ("[tool.specdec]\nreport = ''\n", "pyproject.toml [tool.specdec] key 'report': '' is empty; *"),
    ("[tool.specdec]\ncompare_fail = ''\n", "pyproject.toml [tool.specdec] key 'compare_fail': '' is empty; *"),
    ("[tool.specdec]\nmin_accept_length = nan\n",
     "pyproject.toml [tool.specdec] key 'min_accept_length': nan must be a finite number"),
    ("[tool.specdec]\nstartup_timeout = inf\n",
     "*key 'startup_timeout': inf must be a finite number greater than 0*"),
    ("[tool.specdec]\ngpu_wait_timeout = 0\n",
     "pyproject.toml [tool.specdec] key 'gpu_wait_timeout': 0 must be a finite number greater than 0; "
     "--specdec-gpu-wait-timeout takes*"),
    ("[tool.specdec.tolerances]\naccept_length = nan\n",
     "*[tool.specdec.tolerances] key 'accept_length': tolerance 'nan' for 'accept_length' must be a finite number*"),
    ("[[tool.specdec.workloads]]\ntemperature = inf\n",
     "*[tool.specdec.workloads #1] key 'temperature': inf must be a finite number"),
    # a TOML number is quoted as the number it is, not as the text '1000.0'
    ("[tool.specdec]\ngpus = 1e3\n", "pyproject.toml [tool.specdec] key 'gpus': 1000.0 is not a whole number; *"),
    ("[tool.specdec]\nresume = 'sometimes'\n",
     "*key 'resume': 'sometimes' is not a boolean (use true or false)*"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ar', 'dflash']\nbudget = [8]\n",  # was silently read by none
     "*[tool.specdec.matrix.cpu] key 'budget': [8] is given but none of the methods ar, dflash takes a budget (only "
     "ddtree does); add one, or remove budget"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ddtree', 'ddtree']\nbudget = [8]\n",
     "*[tool.specdec.matrix.cpu] key 'methods': lists 'ddtree' more than once; list each once"),
    ("[tool.specdec.matrix.cpu]\nmethods = ['ddtree']\ntp = [1]\nbudget = [8, 16, 8]\n",
     "*[tool.specdec.matrix.cpu] key 'budget': lists 8 more than once; list each once"),
    # one parser checks every budget: the refusal names the one refused, after one that passed
    ("[tool.specdec]\nbackend = 'embedded'\n[tool.specdec.matrix.cpu]\nmethods = ['ddtree']\nbudget = [8, 100000]\n",
     "*[tool.specdec.matrix.cpu] budget 100000: the embedded engine refuses it: --budget 100000 verifies "
     "100001 tokens a step, which leaves no room for a prompt in --context-length 4096*"),
    ("[tool.specdec.engine]\nextra_args = '--cpu-threads 2'\n",
     "*[tool.specdec.engine] key 'extra_args': '--cpu-threads 2' is one string; give one argument an element, "
     "e.g. [\"--cpu-threads\", \"2\"]"),
    ("[tool.specdec.engine]\nextra_args = ['--port=38777']\n",
     "*[tool.specdec.engine] key 'extra_args': --port is set by the plugin (the plugin picks each server's port); "
     "remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--dp-size', '2']\n",  # GPUs the plugin never leased
     "*[tool.specdec.sglang] key 'extra_args': --dp-size is set by the plugin (the plugin leases each server the "
     "matrix's TP size in GPUs and gives them as CUDA_VISIBLE_DEVICES; this would take others, or more); "
     "remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--base-gpu-id=4']\n", "*key 'extra_args': --base-gpu-id is set by the plugin*"),
    ("[tool.specdec.sglang]\nextra_args = ['--tp-size', '2']\n",
     "*[tool.specdec.sglang] key 'extra_args': --tp-size is set by the plugin (the matrix sets each test's "
     "tensor-parallel size); remove it"),
    # the method, budget and draft model flags: in extra_args they would override every test's
    ("[tool.specdec.sglang]\nextra_args = ['--speculative-algorithm', 'EAGLE']\n",
     "*[tool.specdec.sglang] key 'extra_args': --speculative-algorithm is set by the plugin (the matrix "
     "sets each test's method, through [tool.specdec.sglang] method_flags); remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--speculative-ddtree-budget=8']\n",
     "*[tool.specdec.sglang] key 'extra_args': --speculative-ddtree-budget is set by the plugin (the matrix "
     "sets each test's budget, through [tool.specdec.sglang] method_flags); remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--speculative-num-draft-tokens', '9']\n",
     "*key 'extra_args': --speculative-num-draft-tokens is set by the plugin (the matrix sets each test's "
     "budget, *"),
    # SGLang's aliases and argparse's abbreviations of those flags set them as well
    ("[tool.specdec.sglang]\nextra_args = ['--model', '/m']\n",
     "*[tool.specdec.sglang] key 'extra_args': --model reads as --model-path, which is set by the plugin (set "
     "[tool.specdec] model); remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--tensor-parallel-size=2']\n",
     "*key 'extra_args': --tensor-parallel-size is set by the plugin (the matrix sets each test's "
     "tensor-parallel size); remove it"),
    # a server without its tokenizer refuses every text prompt: no test of the run could pass
    ("[tool.specdec.sglang]\nextra_args = ['--skip-tokenizer-init']\n",
     "*[tool.specdec.sglang] key 'extra_args': --skip-tokenizer-init: SGLang then loads no tokenizer and refuses every "
     "request the plugin sends, whose prompts are text; remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--skip-tok=true']\n",
     "*key 'extra_args': --skip-tok (read as --skip-tokenizer-init): SGLang then loads no tokenizer*"),
    ("[tool.specdec.sglang]\nextra_args = ['--rand', '3']\n",
     "*key 'extra_args': --rand reads as --random-seed, which is set by the plugin (set [tool.specdec.engine] "
     "seed); remove it"),
    ("[tool.specdec.engine]\nextra_args = ['--budg', '3']\n",
     "*[tool.specdec.engine] key 'extra_args': --budg reads as --budget, which is set by the plugin (the matrix "
     "sets each test's budget); remove it"),
    ("[tool.specdec.sglang]\nextra_args = ['--speculative-draft-model-path', '/m']\n",
     "*key 'extra_args': --speculative-draft-model-path is set by the plugin (set [tool.specdec] "
     "draft_model); remove it"),
    ("[tool.specdec.workloads]\nname = 'chat'\nprompts = 'chat'\n",
     "pyproject.toml [tool.specdec] key 'workloads': is one table, [tool.specdec.workloads]; give each workload an entry of its own "
     "headed [[tool.specdec.workloads]] (two brackets)"),
    ("[tool.specdec.known_issues]\nreason = 'x'\n",
     "pyproject.toml [tool.specdec] key 'known_issues': is one table, [tool.specdec.known_issues]; give each known issue an entry of its own "
     "headed [[tool.specdec.known_issues]] (two brackets)"),
    ("[tool.specdec.sglang]\npython = '/nonexistent/python'\n",
     "*[tool.specdec.sglang] key 'python': '/nonexistent/python' is not an executable Python; give the "
     "interpreter that has SGLang installed*"),
])
def test_config_errors_stop_the_run_with_one_clear_line(pytester: pytest.Pytester, toml, message):
    pytester.makepyprojecttoml(toml)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line(result.stderr.str(), "ERROR: pytest-specdec: " + message)
    assert result.stdout.str().count("passed") == 0


def assert_one_line(text: str, pattern: str) -> None:
    """`*` in pattern stands for any text on the same line (brackets are literal, unlike fnmatch)."""
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.startswith("ERROR: pytest-specdec: ")]
    assert len(lines) == 1, text
    position = 0
    for fragment in pattern.split("*"):
        found = lines[0].find(fragment, position)
        assert found >= 0, f"{fragment!r} not in {lines[0]!r}"
        position = found + len(fragment)


@pytest.mark.parametrize("text", ["[matrix.cpu\nmethods = ['ar']\n",
                                  # tomllib recurses per level: past the limit it raises RecursionError
                                  "a = " + "[" * 5000 + "]" * 5000 + "\n"])
def test_invalid_toml_in_specdec_toml(pytester: pytest.Pytester, text):
    pytester.makefile(".toml", specdec=text)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line(result.stderr.str(), "ERROR: pytest-specdec: specdec.toml: invalid TOML (*); "
                                         "fix the syntax")


def test_specdec_toml_beside_a_tool_specdec_table_is_a_usage_error(pytester: pytest.Pytester):
    """specdec.toml won, and pyproject.toml's table was ignored without a word."""
    pytester.makefile(".toml", specdec="[matrix.cpu]\nmethods = ['ar']\n")
    pytester.makepyprojecttoml("[tool.specdec]\nbackend = 'embedded'\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line(result.stderr.str(), "ERROR: pytest-specdec: both specdec.toml and pyproject.toml "
                                         "[tool.specdec] configure pytest-specdec; keep one of them")
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\naddopts = '-q'\n")  # no table: specdec.toml rules
    assert pytester.runpytest().ret == pytest.ExitCode.OK


def test_non_utf8_specdec_toml_is_a_usage_error(pytester: pytest.Pytester):
    (pytester.path / "specdec.toml").write_bytes(b"[matrix.cpu]\nmethods = ['ar'] # \xff\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line(result.stderr.str(), "ERROR: pytest-specdec: specdec.toml: line 2 is not UTF-8 "
                                         "(byte 0xff); save the file as UTF-8")


def test_a_known_issues_file_nested_too_deeply_is_invalid_toml(tmp_path: Path):
    path = tmp_path / "known_issues.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecdecUsageError, match=r"^known_issues.toml: invalid TOML \(arrays or tables nested too "
                                                r"deeply to read\); fix the syntax$"):
        config.load_known_issues(path)


def test_non_utf8_known_issues_file_names_file_and_line(tmp_path: Path):
    path = tmp_path / "known_issues.toml"
    path.write_bytes(b"[[known_issues]]\nreason = '\xffx'\n")
    with pytest.raises(SpecdecUsageError, match=r"^known_issues.toml: line 2 is not UTF-8 \(byte "
                                                r"0xff\); save the file as UTF-8$"):
        config.load_known_issues(path)


def test_a_known_issues_file_refuses_a_repeated_value_naming_file_entry_and_field(tmp_path: Path):
    path = tmp_path / "known_issues.toml"
    path.write_text("[[known_issues]]\nreason = 'a'\n[[known_issues]]\nreason = 'b'\n"
                    "method = ['dflash', 'ddtree', 'dflash']\n")
    with pytest.raises(SpecdecUsageError, match=r"^known_issues.toml \[known_issues #2\] key 'method': lists "
                                                r"'dflash' more than once; list each once$"):
        config.load_known_issues(path)


def test_a_known_issues_file_with_a_byte_order_mark_is_read(tmp_path: Path):
    """An editor's invisible UTF-8 byte-order mark was refused as "Invalid statement (at line 1,
    column 1)"."""
    plain = tmp_path / "plain.toml"
    plain.write_text("[[known_issues]]\nmethod = 'ddtree'\nreason = 'upstream bug'\n", encoding="utf-8")
    marked = tmp_path / "known_issues.toml"
    marked.write_text(plain.read_text(), encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert config.load_known_issues(marked) == config.load_known_issues(plain)


def test_unreadable_toml_is_a_usage_error(tmp_path: Path):
    with pytest.raises(SpecdecUsageError, match=r"cannot be read \(.+\); fix its permissions"):
        config._read_toml(tmp_path)  # a directory: open() raises IsADirectoryError


def test_specdec_toml_is_read(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.other]\nmodel = 'not ours'\n")
    (tmp_path / "specdec.toml").write_text(
        "model = 'from-specdec-toml'\n[matrix.cpu]\nmethods = ['ar']\n")
    cfg = config.load(tmp_path)
    assert cfg.model == "from-specdec-toml"
    assert cfg.source == "specdec.toml"
    assert list(cfg.matrices) == ["cpu"]


@pytest.mark.parametrize("toml, where", [
    ("[matrix.cpu]\nmethods = ['ar']\ntp = [6]\n", "specdec.toml [matrix.cpu] key 'tp': 6"),
    ("[engine]\nseed = 'x'\n", "specdec.toml [engine] key 'seed': 'x'"),
    ("[sglang]\nmethod_flags = 'eagle-ish'\n", "specdec.toml [sglang] key 'method_flags': unknown"),
    ("[metrics]\nmy_figure = 'up'\n", "specdec.toml [metrics] key 'my_figure': 'up'"),
    ("methods = ['ar']\n", "specdec.toml [top level] key 'methods': ['ar'] belongs in a matrix table, one per "
                          "hardware family ([matrix.<family>], "),
])
def test_specdec_toml_errors_name_that_file_and_its_own_tables(tmp_path: Path, toml, where):
    """specdec.toml holds [matrix.cpu], not [tool.specdec.matrix.cpu]: the error names what the user wrote."""
    (tmp_path / "specdec.toml").write_text(toml)
    with pytest.raises(SpecdecUsageError) as raised:
        config.load(tmp_path)
    assert str(raised.value).startswith(where), str(raised.value)


def test_defaults_without_any_config(tmp_path: Path):
    cfg = config.load(tmp_path)
    assert cfg.source == "defaults"
    assert set(cfg.matrices) == {"cpu", "blackwell", "hopper"}
    assert cfg.matrices["blackwell"].budget == (8, 12, 15, 16, 32, 64)


def test_matrix_entries_give_budgets_to_ddtree_only():
    matrix = config.Matrix("cpu", ("ar", "dflash", "ddtree"), (1, 2), (8, 16))
    assert matrix.entries() == [
        ("ar", 1, None), ("ar", 2, None), ("dflash", 1, None), ("dflash", 2, None),
        ("ddtree", 1, 8), ("ddtree", 1, 16), ("ddtree", 2, 8), ("ddtree", 2, 16)]


def test_full_config_parses_into_typed_values(tmp_path: Path):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "pyproject.toml").write_text("""
[tool.specdec]
model = "Qwen/Qwen3.6-27B"
draft_model = "z-lab/Qwen3.6-27B-DFlash"
model_cache = "/dev/shm/models"
min_accept_length = 1.5

[tool.specdec.matrix.blackwell]
methods = ["dflash", "ddtree"]
tp = [1, 4, 8]
budget = [8, 16]

[[tool.specdec.workloads]]
name = "mine"
prompts = "prompts.jsonl"
max_new_tokens = 32
concurrency = 4

[tool.specdec.tolerances]
output_tok_s = "5%"
accept_length = 2

[tool.specdec.engine]
draft_agreement = 0.5

[tool.specdec.sglang]
method_flags = {ddtree = ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "{budget}"]}

[[tool.specdec.known_issues]]
family = "blackwell"
method = "ddtree"
tp = [8]
reason = "NCCL hang"
""")
    cfg = config.load(tmp_path)
    assert cfg.model_cache == "/dev/shm/models" and cfg.min_accept_length == 1.5
    assert cfg.matrices["blackwell"].tp == (1, 4, 8)
    (workload,) = cfg.workloads
    assert workload.name == "mine" and workload.prompts == str(tmp_path / "prompts.jsonl")
    assert workload.concurrency == 4 and workload.max_new_tokens == 32
    assert {m: str(t) for m, t in cfg.tolerances.items()} == {"output_tok_s": "5%", "accept_length": "2"}
    assert cfg.engine.draft_agreement == 0.5
    assert cfg.sglang.method_flags["ddtree"][-1] == "{budget}"
    assert tuple(cfg.sglang.method_flags["dflash"]) == ("--speculative-algorithm", "DFLASH")
    (issue,) = cfg.known_issues
    assert issue.matches(arch="sm_100", family="blackwell", method="ddtree", tp=8, budget=16,
                         backend="sglang")
    assert not issue.matches(arch="sm_100", family="blackwell", method="ddtree", tp=4, budget=16,
                             backend="sglang")


def test_shipped_known_issues_hold_the_sm120_story():
    root = Path(__file__).resolve().parents[2]
    issues = config.load_known_issues(root / "baselines" / "known_issues.toml")
    assert any(i.arch == "sm_120" and i.methods == ("ddtree",) and i.budget == (8, 12)
               and "illegal instruction" in i.reason for i in issues)


BASELINE_HEAD = '{"format": "pytest-specdec-baselines", "version": 1, "hardware_key": "cpu", '


@pytest.mark.parametrize("files, message", [
    ({"baselines/cpu.json": BASELINE_HEAD + '"entries": {\n  "t": {,}\n}}'},
     "baseline file */baselines/cpu.json is not valid JSON (line 2, column 9: *); fix it, or "
     "move it aside (or delete it) and save a new one with --specdec-save-baseline"),
    ({"baselines/cpu.json": BASELINE_HEAD + '"entries": {"test_generation[ar-tp1-chat]": '
                                            '{"output_tok_s": {"value": NaN, "direction": '
                                            '"higher"}}}}'},
     "baseline file */cpu.json: test_generation[ar-tp1-chat] output_tok_s: 'value' must be a "
     "finite number, got nan"),
    ({"baselines/cpu.json": BASELINE_HEAD + '"entries": {"test_generation[ar-tp1-chat]": '
                                            '{"accept_length": {"value": 2.0, "direction": '
                                            '"lower"}}}}'},
     "baseline file */cpu.json: test_generation[ar-tp1-chat] accept_length: direction 'lower', "
     "but 'higher' is better for accept_length; fix the entry, or move the file aside and save a new "
     "one with --specdec-save-baseline"),
    ({"prompts.jsonl": '{"prompt": "fine"}\n{"prompt": "unterminated}\n'},
     "*prompts.jsonl:2: not valid JSON (*); each line must be a JSON object like*"),
    ({"prompts.jsonl": '{"prompt": "\\ud800"}\n'},
     "*prompts.jsonl:1: \"prompt\" holds '\\ud800' at character 1, a lone surrogate*"),
    # the file is named with its folder: a bare known_issues.toml did not say where to look
    ({"baselines/known_issues.toml": "[[known_issues]]\nreason = 'x'\ntp = [3]\n"},
     "baselines/known_issues.toml [known_issues #1] key 'tp': 3 is not a power of two*"),
    # pyproject.toml's header, copied from the README into the file, named with the header it wants
    ({"baselines/known_issues.toml": "[[tool.specdec.known_issues]]\nreason = 'x'\n"},
     "baselines/known_issues.toml [top level]: unknown key 'tool'; this file lists known issues at its "
     "top level, each headed [[known_issues]] (not [[tool.specdec.known_issues]]*"),
])
def test_bad_input_files_stop_the_run_before_any_server_boots(pytester: pytest.Pytester, files,
                                                              message):
    """Every input file is read at configure time: a mistake is a usage error naming the file,
    the position and the fix, not a failure after each configuration's workload."""
    pytester.makepyprojecttoml("""
[tool.specdec]
backend = "embedded"
[tool.specdec.matrix.cpu]
methods = ["ar"]
[[tool.specdec.workloads]]
name = "chat"
prompts = "prompts.jsonl"
""")
    (pytester.path / "prompts.jsonl").write_text('{"prompt": "hello"}\n')
    for name, text in files.items():
        (pytester.path / name).parent.mkdir(exist_ok=True)
        (pytester.path / name).write_text(text)
    pytester.makepyfile(test_generation="""
def test_generation(specdec_server, specdec_workload):
    specdec_server.run(specdec_workload)
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line(result.stderr.str(), "ERROR: pytest-specdec: " + message)
    assert not (pytester.path / ".specdec" / "artifacts").exists(), "a server was started"


def test_a_missing_prompt_file_is_named_where_it_was_looked_for(tmp_path):
    """`prompts = "data/p.jsonl"` that is not there said only "is neither a built-in set nor a JSONL
    file; fix the path": a run started in tests/ did not say that the path is the project root's,
    nor which file it looked for, and a folder there read as no file at all."""
    (tmp_path / "pyproject.toml").write_text('[[tool.specdec.workloads]]\nprompts = "data/p.jsonl"\n')
    with pytest.raises(SpecdecUsageError) as missing:
        config.load(tmp_path)
    assert str(missing.value).endswith(f"no file at {tmp_path / 'data' / 'p.jsonl'} (a relative path is "
                                       "the project root's): fix the path"), missing.value
    (tmp_path / "data" / "p.jsonl").mkdir(parents=True)
    with pytest.raises(SpecdecUsageError) as folder:
        config.load(tmp_path)
    assert f"{tmp_path / 'data' / 'p.jsonl'} is a folder (a relative path" in str(folder.value), folder.value
    absolute = tmp_path / "elsewhere.jsonl"
    (tmp_path / "pyproject.toml").write_text(f'[[tool.specdec.workloads]]\nprompts = "{absolute}"\n')
    with pytest.raises(SpecdecUsageError) as outside:
        config.load(tmp_path)
    assert str(outside.value).endswith(f"no file at {absolute}: fix the path"), outside.value


@pytest.mark.parametrize("make, link, said", [
    (lambda data: (data / "p.jsonl").symlink_to("gone.jsonl"), "data/p.jsonl",
     "is a broken symbolic link to gone.jsonl, where nothing is"),
    (lambda data: (data / "p.jsonl").symlink_to("p.jsonl"), "data/p.jsonl",
     "is a symbolic link loop (it points to p.jsonl, and following the links never reaches a file)"),
    (lambda data: (data.rmdir(), data.symlink_to("moved")), "data",
     ", a folder on its path, is a broken symbolic link to moved, where nothing is"),
])
def test_a_prompt_file_behind_a_broken_link_names_the_link_and_where_it_points(tmp_path, make, link, said):
    """A dangling link or a link loop at the prompts path (or at a folder on it) read "no file at
    PATH: fix the path", sending the user to a path that is right, not to the link."""
    (tmp_path / "data").mkdir()
    make(tmp_path / "data")
    (tmp_path / "pyproject.toml").write_text('[[tool.specdec.workloads]]\nprompts = "data/p.jsonl"\n')
    with pytest.raises(SpecdecUsageError) as info:
        config.load(tmp_path)
    assert str(info.value) == (f"pyproject.toml [tool.specdec.workloads #1] key 'prompts': 'data/p.jsonl' leads to "
                               f"no file: {tmp_path / link}{'' if said.startswith(',') else ' '}{said}; repoint or "
                               f"remove the link, or fix the path")


def test_a_prompt_file_under_the_home_folder_is_found(tmp_path, monkeypatch):
    """`prompts = "~/p.jsonl"` was read relative to the project ("'~/p.jsonl' is neither a built-in
    set nor a JSONL file"), where model paths expand `~`."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "p.jsonl").write_text('{"prompt": "hi"}\n')
    monkeypatch.setenv("HOME", str(home))
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[[tool.specdec.workloads]]\nname = "mine"\nprompts = "~/p.jsonl"\n')
    (workload,) = config.load(project).workloads
    assert workload.prompts == str(home / "p.jsonl")


def test_a_relative_sglang_python_is_the_projects(tmp_path: Path, monkeypatch):
    """[tool.specdec.sglang] python = "venv/bin/python" is the project's interpreter, as every
    path in [tool.specdec] is the project root's: from a subfolder it was refused."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path / "tests")
    cfg = config.parse({"sglang": {"python": "venv/bin/python"}}, "pyproject.toml", tmp_path)
    assert cfg.sglang.python == str(python)
    assert config.parse({"sglang": {"python": "sh"}}, "pyproject.toml", tmp_path).sglang.python == "sh"


AR_ONLY = "[tool.specdec.matrix.cpu]\nmethods = [\"ar\"]\ntp = [1]\n"


def nested_project(tmp_path: Path, settings: str = "pyproject.toml") -> Path:
    """`a/pytest.ini` above `a/project`, whose own file holds an ar-only matrix (one test)."""
    (tmp_path / "a" / "project").mkdir(parents=True)
    (tmp_path / "a" / "pytest.ini").write_text("[pytest]\n")
    project = tmp_path / "a" / "project"
    (project / settings).write_text(AR_ONLY if settings == "pyproject.toml"
                                     else AR_ONLY.replace("tool.specdec.", ""))
    (project / "test_cells.py").write_text("def test_cell(specdec_spec):\n    pass\n")
    return project


def collect(cwd: Path, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("settings", ["pyproject.toml", "specdec.toml"])
@pytest.mark.parametrize("where", ["in the project", "above it"])
def test_a_project_config_that_pytest_passes_over_stops_the_run(tmp_path, settings, where):
    """A pytest.ini above a project whose pyproject.toml has [tool.specdec] but no
    [tool.pytest.ini_options] became pytest's config file: the run collected the default matrix
    (47 tests), its header saying only "config defaults"."""
    project = nested_project(tmp_path, settings)
    done = collect(project) if where == "in the project" else collect(project.parent, "project/test_cells.py")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    ini = tmp_path / "a" / "pytest.ini"
    fix = (f"add a [tool.pytest.ini_options] table to it (pytest then takes it for the config file) or pass "
           f"-c {project / settings}" if settings == "pyproject.toml" else
           f"give {project} a pytest config file (a pytest.ini, or a [tool.pytest.ini_options] table in its "
           f"pyproject.toml) or pass -c with that file")
    assert_one_line(done.stderr, f"ERROR: pytest-specdec: {project / settings} configures pytest-specdec but is "
                                 f"not read: pytest chose the config file {ini} above it, so the plugin runs its "
                                 f"default matrix. To use it, {fix}; to keep the defaults, pass -c {ini}")


def test_each_way_out_of_a_passed_over_config_is_taken(tmp_path):
    """The fixes the error names work, and a project pytest reads is not questioned."""
    project = nested_project(tmp_path)
    assert "1 test collected" in collect(project, "-c", str(project / "pyproject.toml")).stdout
    assert "47 tests collected" in collect(project, "-c", str(tmp_path / "a" / "pytest.ini")).stdout
    with (project / "pyproject.toml").open("a") as toml:
        toml.write("\n[tool.pytest.ini_options]\n")
    assert "1 test collected" in collect(project).stdout
    # settings above the folder pytest starts in, none in it: a subfolder of the project
    (project / "pyproject.toml").unlink()
    (tmp_path / "a" / "pytest.ini").unlink()
    (tmp_path / "a" / "pyproject.toml").write_text(AR_ONLY + "\n[tool.pytest.ini_options]\n")
    assert "1 test collected" in collect(project).stdout


@pytest.mark.parametrize("key", ["model", "draft_model", "model_cache"])
@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_model_path_is_named_as_blank(key, blank, tmp_path):
    """`model = ""` passed, and the sglang backend then asked the user to set the model they had set."""
    with pytest.raises(SpecdecUsageError, match=rf"^pyproject.toml \[tool.specdec\] key '{key}': '{blank}' is empty; "
                                                rf"name it \({key} = \".+\"\) or leave the key out$"):
        config.parse({key: blank}, "pyproject.toml", tmp_path)
    assert getattr(config.parse({key: "x"}, "pyproject.toml", tmp_path), key) == "x"


@pytest.mark.parametrize("name, problem", [
    ("  ", "'  ' is blank; give the workload a name, e.g. name = \"chat\""),
    ("a\nb", "'a\\nb' holds '\\n' (U+000A), a control character or line break that no row of the summary or "
             "report shows as written; remove it"),
    ("a\tb", "'a\\tb' holds '\\t' (U+0009), *"),
    ("a\x00b", "'a\\x00b' holds '\\x00' (U+0000), *"),
    ("a\u2028b", "'a\\u2028b' holds '\\u2028' (U+2028), *"),
])
def test_a_workload_name_that_no_row_shows_as_written_is_refused(name, problem, tmp_path):
    """A blank name, or one with a line feed, tab or NUL, passed: the summary's row and report.md's
    table row broke at the line feed, and a blank name read as no workload."""
    with pytest.raises(SpecdecUsageError) as raised:
        config.parse({"workloads": [{"name": name}]}, "pyproject.toml", tmp_path)
    assert_one_line("ERROR: pytest-specdec: " + str(raised.value),
                    "ERROR: pytest-specdec: pyproject.toml [tool.specdec.workloads #1] key 'name': " + problem)


@pytest.mark.parametrize("num_prompts", [1_000_001, 9223372036854775807])
def test_more_requests_than_a_run_can_build_is_refused_at_start(num_prompts, tmp_path):
    """A slip of extra digits passed the config and the run then built every request: a
    MemoryError traceback (INTERNALERROR) after minutes, or the machine out of memory. Parsed
    here only, so a regression fails the test without building the list."""
    with pytest.raises(SpecdecUsageError) as raised:
        config.parse({"workloads": [{"num_prompts": num_prompts}]}, "pyproject.toml", tmp_path)
    assert str(raised.value) == (f"pyproject.toml [tool.specdec.workloads #1] key 'num_prompts': {num_prompts} is "
                                 f"more requests than a run sends (at most 1_000_000); lower it, e.g. "
                                 f"num_prompts = 64")
    workloads = config.parse({"workloads": [{"num_prompts": 1_000_000}]}, "pyproject.toml",
                             tmp_path).workloads
    assert workloads[0].num_prompts == 1_000_000


@pytest.mark.parametrize("name", ["my chat ü", "a/b", "..", "-", "chat-long"])
def test_a_workload_name_of_printable_characters_is_taken_as_written(name, tmp_path):
    assert config.parse({"workloads": [{"name": name}]}, "pyproject.toml", tmp_path).workloads[0].name == name


@pytest.mark.parametrize("arch, nearest", [
    ("sm_91", "arch = 'sm_90' (hopper)"),
    ("sm_12", "arch = 'sm_120' or 'sm_121' (blackwell)"),  # a digit short of either: both named
    ("sm_102", "arch = 'sm_101' or 'sm_103' (blackwell)"),
    ("sm_75", "arch = 'sm_80' (ampere)"),
])
def test_a_known_issue_of_an_unlisted_architecture_is_warned_of(pytester: pytest.Pytester, arch, nearest):
    """An arch of no known family applies only on a host of that very chip: meant there, so no error, but
    a slip (sm_91 for sm_90) would silently never apply, so the run says so and names the nearest."""
    pytester.makepyprojecttoml(f"[[tool.specdec.known_issues]]\nreason = 'x'\narch = '{arch}'\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-arch", "sm_89")  # a host of a known chip
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([f"*PytestConfigWarning: pytest-specdec: pyproject.toml [[]tool.specdec.known_issues #1[]] key "
                                 f"'arch': '{arch}' is an architecture of no known family, so the entry applies "
                                 f"only on a host of exactly that architecture (this one is sm_89); if a slip, "
                                 f"write the nearest known: {nearest}"])


def test_a_known_issue_of_a_listed_architecture_is_not_warned_of(pytester: pytest.Pytester):
    pytester.makepyprojecttoml("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 'sm_90'\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--specdec-arch", "sm_89")
    result.assert_outcomes(passed=1)
    assert "PytestConfigWarning" not in result.stdout.str()


def test_an_unlisted_architecture_is_not_warned_of_on_a_host_of_it(tmp_path: Path):
    """A host of the unlisted chip itself is the one the entry is for."""
    path = tmp_path / "known_issues.toml"
    path.write_text("[[known_issues]]\nreason = 'x'\narch = '9.1'\n")
    assert config.unlisted_arch_warnings(config.load_known_issues(path), "sm_91") == []


def test_an_unlisted_architecture_in_the_known_issues_file_is_warned_of(tmp_path: Path):
    path = tmp_path / "known_issues.toml"
    path.write_text("[[known_issues]]\nreason = 'x'\narch = 'sm_12'\n")
    warnings = config.unlisted_arch_warnings(config.load_known_issues(path), "sm_90")
    assert warnings == ["known_issues.toml [known_issues #1] key 'arch': 'sm_12' is an architecture of no known "
                        "family, so the entry applies only on a host of exactly that architecture (this one is "
                        "sm_90); if a slip, write the nearest known: arch = 'sm_120' or 'sm_121' (blackwell)"]


def test_a_known_issues_file_whose_known_issues_is_no_list_names_the_header(tmp_path: Path):
    path = tmp_path / "known_issues.toml"
    path.write_text("known_issues = 3\n")
    with pytest.raises(SpecdecUsageError) as raised:
        config.load_known_issues(path)
    assert str(raised.value) == ("known_issues.toml [top level] key 'known_issues': 3 must be a list of tables; give "
                                 "each known issue an entry of its own headed [[known_issues]]")


@pytest.mark.parametrize("toml, message", [
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 5\n",
     "key 'arch': 5 is a number, not a string; arch takes a GPU architecture such as sm_90, sm_120 or 12.0, "
     "e.g. arch = \"sm_120\""),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nfamily = true\n",
     "key 'family': true is a boolean, not a string; family takes one of blackwell, hopper, ada, ampere, cpu, "
     "e.g. family = \"blackwell\""),
    ("[[tool.specdec.known_issues]]\nreason = 'x'\nfamily = ['hoper']\n",
     "key 'family': ['hoper'] is a list, not a string; family takes one of blackwell, hopper, ada, ampere, cpu, "
     "e.g. family = \"blackwell\""),
    ("[tool.specdec.engine]\ndevice = 0\n",
     "key 'device': 0 is a number, not a string; device takes one of auto, cpu, cuda, e.g. device = \"cuda\""),
    ("[tool.specdec.engine]\nmodel_preset = 8\n",
     "key 'model_preset': 8 is a number, not a string; model_preset takes one of tiny, 8b-layer, tiny-hybrid, "
     "27b-hybrid-layers, e.g. model_preset = \"tiny\""),
    # where the quoted value is one the key accepts, quoting it stays the fix
    ("[[tool.specdec.known_issues]]\nreason = 'x'\narch = 9.0\n",
     "key 'arch': 9.0 is a number, not a string; write it in quotes: arch = \"9.0\""),
    ("[[tool.specdec.workloads]]\nprompts = ['code']\n",
     "key 'prompts': ['code'] is a list, not a string; give the one string, not a list: prompts = \"code\""),
])
def test_a_key_of_known_values_given_another_type_is_told_its_values_not_quotes(tmp_path, toml, message):
    """Quoting `arch = 5` as "5" would only be refused next as no architecture: name what the key takes."""
    (tmp_path / "pyproject.toml").write_text(toml)
    with pytest.raises(SpecdecUsageError) as raised:
        config.load(tmp_path)
    assert str(raised.value).endswith(message), str(raised.value)


@pytest.mark.parametrize("name, value, problem", [
    ("lossless", True, "true is a boolean, not a string; lossless takes exact, prefix:N or off, e.g. "
                       "lossless = \"prefix:32\""),
    ("backend", 3, "3 is a number, not a string; backend takes one of auto, embedded or sglang, e.g. "
                   "backend = \"embedded\""),
    ("backend", ["sglan"], "['sglan'] is a list, not a string; backend takes one of auto, embedded or sglang, "
                           "e.g. backend = \"embedded\""),
    ("arch", 90, "90 is a number, not a string; arch takes a GPU architecture such as sm_90 or sm_120, e.g. "
                 "arch = \"sm_120\""),
    ("shard", 2, "2 is a number, not a string; shard takes K/N, shard K of N (1-based), e.g. shard = \"2/4\""),
    ("compare_fail", 3, "3 is a number, not a string; compare_fail takes METRIC:TOLERANCE pairs, e.g. "
                        "compare_fail = \"output_tok_s:5%,accept_length:0\""),
    ("reference", 3, "3 is a number, not a string; reference takes a method without a tree budget, ar or "
                     "dflash, e.g. reference = \"ar\""),
    # accepted once quoted: the quotes stay the fix
    ("arch", 12.0, "12.0 is a number, not a string; write it in quotes: arch = \"12.0\""),
    ("backend", ["sglang"], "['sglang'] is a list, not a string; give the one string, not a list: "
                            "backend = \"sglang\""),
])
def test_an_option_key_of_known_values_given_another_type_is_told_its_values(name, value, problem):
    from pytest_specdec.options import OPTIONS_BY_NAME, parse_value

    where = f"pyproject.toml [tool.specdec] key {name!r}"
    with pytest.raises(SpecdecUsageError) as raised:
        parse_value(OPTIONS_BY_NAME[name], value, where)
    assert str(raised.value).startswith(f"{where}: {problem}; "), str(raised.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:0", "http://127.0.0.1:65536"])
def test_a_server_url_whose_port_no_server_has_is_refused_where_it_is_set(url):
    """Port 0 passed the URL check, whose error says a port is 1-65535, and the run went on to
    fail contacting it; both ends of the range are refused alike, naming the flag."""
    from pytest_specdec.options import OPTIONS_BY_NAME, parse_value

    with pytest.raises(SpecdecUsageError) as raised:
        parse_value(OPTIONS_BY_NAME["server_url"], url, "--specdec-server-url")
    assert str(raised.value).startswith(f"--specdec-server-url: '{url}': its port is out of range; "
                                        f"a port is 1-65535; "), str(raised.value)
    assert parse_value(OPTIONS_BY_NAME["server_url"], "http://127.0.0.1:1", "--specdec-server-url")


def test_a_number_of_seconds_is_shown_as_written_not_as_pythons_float():
    """The header said stall_timeout=60.0 (command line) for --specdec-stall-timeout=60, and 30.0 for
    a file's 30: Python's spelling, which the user never wrote. A fraction keeps its digits."""
    from pytest_specdec.options import resolve

    settings = resolve({"stall_timeout": "60", "startup_timeout": "1.25"}, {"gpu_wait_timeout": "7200"},
                       {"gpu_wait_timeout": 30, "baseline_lock_timeout": 1234567.5}, "pyproject.toml")
    shown = {name: settings.shown(name, settings.origins[name], settings.values[name])
             for name in ("stall_timeout", "startup_timeout", "gpu_wait_timeout", "baseline_lock_timeout")}
    assert shown == {"stall_timeout": "60", "startup_timeout": "1.25", "gpu_wait_timeout": "7200",
                     "baseline_lock_timeout": "1234567.5"}
    assert settings.shown("gpu_wait_timeout", "pyproject.toml", settings.overridden["gpu_wait_timeout"][0][1]) == "30"


@pytest.mark.parametrize("url, extra", [("http://127.0.0.1:30000/?x=1", "a query"),
                                        ("http://127.0.0.1:30000/#top", "a fragment"),
                                        ("http://user:pass@127.0.0.1:30000", "credentials")])
def test_a_server_url_with_a_query_fragment_or_credentials_is_refused_where_it_is_set(url, extra):
    """Each endpoint's path is appended to the URL: `/?x=1` + `/server_info` asked for `/` and the run
    stopped on '/get_server_info answered a JSON str'; `user:pass@` failed as 'Name or service not known'."""
    from pytest_specdec.options import OPTIONS_BY_NAME, parse_value

    with pytest.raises(SpecdecUsageError) as raised:
        parse_value(OPTIONS_BY_NAME["server_url"], url, "--specdec-server-url")
    assert str(raised.value).startswith(f"--specdec-server-url: '{url}' has {extra}, which the server's paths "
                                        f"cannot follow; give the server's base URL alone"), str(raised.value)
    assert parse_value(OPTIONS_BY_NAME["server_url"], "http://host/sglang/", "--specdec-server-url")


@pytest.mark.parametrize("written, count", [("'2'", 2), ("' 0 '", 0), ("3", 3)])
def test_a_workloads_quoted_warmup_requests_is_taken_as_the_run_wide_key_takes_it(tmp_path, written, count):
    """[tool.specdec] warmup_requests = "2" is an option's value, read as the command line's text,
    so a quoted whole number passes; the same in a workload's entry was refused."""
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.specdec]\nwarmup_requests = {written}\n[[tool.specdec.workloads]]\nname = 'w'\n"
        f"warmup_requests = {written}\n")
    (spec,) = config.load(tmp_path).workloads
    assert spec.warmup_requests == count


@pytest.mark.parametrize("written, problem", [
    ("'-1'", "-1 must be 0 (no warm-up) or more"),
    ("'two'", "'two' must be a whole number; write a whole number without quotes, e.g. warmup_requests = 1"),
])
def test_a_workloads_quoted_warmup_requests_that_is_no_count_is_refused(tmp_path, written, problem):
    (tmp_path / "pyproject.toml").write_text(f"[[tool.specdec.workloads]]\nname = 'w'\nwarmup_requests = {written}\n")
    with pytest.raises(SpecdecUsageError) as info:
        config.load(tmp_path)
    assert str(info.value) == f"pyproject.toml [tool.specdec.workloads #1] key 'warmup_requests': {problem}"
