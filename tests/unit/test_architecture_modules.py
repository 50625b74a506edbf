"""docs/ARCHITECTURE.md names every module of every package the project ships (pyproject's
`[tool.setuptools] packages`: the plugin, its servers, the engine, the prompts and
`specdec_kernels`), so a maintainer looking for where a thing lives finds it there: a module added
without its line reads as if it did not exist.

A module counts as named only by its file name (`shard.py`) or its path, relative (`engine/cli.py`,
`kernels/tree_verify.py`) or dotted (`pytest_specdec.engine.cli`, `specdec_kernels.tree_verify`,
`kernels.tree_verify`): a word that merely shares its stem (`shard.json`, `tree_verify_triton.py`)
names some other thing. A file name two packages share (`metrics.py`) is ambiguous, so each of
those modules must be named by a path."""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ARCHITECTURE.md"
# A name starts a word of its own: not the tail of a longer name, path or dotted reference.
_BEFORE = r"(?<![\w./-])"


@dataclass(frozen=True)
class Module:
    path: Path  # relative to ROOT: pytest_specdec/engine/cli.py, kernels/tree_verify.py
    dotted: str  # as imported: pytest_specdec.engine.cli, specdec_kernels.tree_verify


def shipped_packages() -> dict[str, Path]:
    """pyproject's packages, each with its folder (package-dir where it maps one)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = setuptools.get("package-dir", {})
    return {name: Path(folders.get(name, name.replace(".", "/"))) for name in setuptools["packages"]}


def shipped_modules() -> list[Module]:
    return sorted((Module(path.relative_to(ROOT), f"{package}.{path.stem}")
                   for package, folder in shipped_packages().items()
                   for path in (ROOT / folder).glob("*.py") if path.name != "__init__.py"),
                  key=lambda module: module.path)


def _names(module: Module, shared: bool) -> list[str]:
    """The patterns that name `module`: its file name unless `shared`, and its paths with at least
    the package's folder (`engine/cli.py`, `engine.cli` and longer; `kernels.x` for the folder)."""
    folder_parts, import_parts = module.path.parent.parts, module.dotted.split(".")[:-1]
    stem = module.path.stem
    relative = ["/".join((*folder_parts[i:], module.path.name)) for i in range(len(folder_parts))]
    dotted = {".".join((*parts[i:], stem)) for parts in (folder_parts, import_parts)
              for i in range(len(parts))}
    # a dotted path may go on to an attribute (`engine.cli.main`), but not a longer name
    return ([re.escape(name) + r"(?![\w-])" for name in ([] if shared else [module.path.name]) + relative]
            + [re.escape(name) + r"(?![\w-])(?!\.py\b)" for name in sorted(dotted)])


def unlisted(page: str, modules: list[Module]) -> list[str]:
    """The modules the page names by none of their names (`_names`)."""
    counts = Counter(module.path.name for module in modules)
    return [str(module.path) for module in modules
            if not re.search(_BEFORE + "(?:" + "|".join(_names(module, counts[module.path.name] > 1)) + ")", page)]


def test_every_shipped_module_is_named_in_the_architecture_page():
    missing = unlisted(PAGE.read_text(), shipped_modules())
    assert not missing, (f"{PAGE.relative_to(ROOT)} names no line for {', '.join(missing)}: add one each, "
                         "by file name (`shard.py`), or by path (`engine/metrics.py`) where two "
                         "packages share the file name")


def test_every_shipped_package_is_in_the_packages_table():
    page = PAGE.read_text()
    assert [name for name in shipped_packages() if f"| `{name}` |" not in page] == []


def test_the_modules_come_from_every_package_of_pyproject():
    folders = {module.path.parent for module in shipped_modules()}
    assert {Path("pytest_specdec"), Path("pytest_specdec/servers"), Path("pytest_specdec/engine"),
            Path("kernels")} <= folders
    assert Module(Path("kernels/tree_verify.py"), "specdec_kernels.tree_verify") in shipped_modules()


def test_a_module_left_out_is_found():
    page = PAGE.read_text()
    cut = "\n".join(line for line in page.splitlines() if "`suggest.py`" not in line)
    assert unlisted(cut, shipped_modules()) == ["pytest_specdec/suggest.py"]


SHARD = Module(Path("pytest_specdec/shard.py"), "pytest_specdec.shard")
VERIFY = Module(Path("kernels/tree_verify.py"), "specdec_kernels.tree_verify")
CLI = Module(Path("pytest_specdec/engine/cli.py"), "pytest_specdec.engine.cli")


def test_a_file_name_or_a_path_names_a_module():
    for page in ("`shard.py` plans", "see pytest_specdec/shard.py.", "`pytest_specdec.shard.plan`"):
        assert unlisted(page, [SHARD]) == [], page
    for page in ("`tree_verify.py`", "`kernels/tree_verify.py`", "`kernels.tree_verify`",
                 "`specdec_kernels.tree_verify`"):
        assert unlisted(page, [VERIFY]) == [], page
    for page in ("`cli.py`", "`engine/cli.py`", "`engine.cli`", "`pytest_specdec.engine.cli.main`"):
        assert unlisted(page, [CLI]) == [], page


def test_a_word_that_shares_the_stem_names_no_module():
    for page in ("`shard.json`", "`shard_dir.py`", "`shard.plan`", "tests/unit/test_shard.py",
                 "`merge.shard`", "`shard`"):
        assert unlisted(page, [SHARD]) == ["pytest_specdec/shard.py"], page
    for page in ("`tree_verify_triton.py`", "`kernels.tree_verify_triton`", "`tree_verify.check`",
                 "`specdec_kernels.tree_verify.py`"):
        assert unlisted(page, [VERIFY]) == ["kernels/tree_verify.py"], page
    assert unlisted("`foo/cli.py`, `xengine/cli.py`", [CLI]) == ["pytest_specdec/engine/cli.py"]


def test_a_file_name_two_packages_share_needs_a_path():
    plugin = Module(Path("pytest_specdec/metrics.py"), "pytest_specdec.metrics")
    engine = Module(Path("pytest_specdec/engine/metrics.py"), "pytest_specdec.engine.metrics")
    assert unlisted("`metrics.py`", [plugin, engine]) == [str(plugin.path), str(engine.path)]
    assert unlisted("`engine/metrics.py`", [plugin, engine]) == [str(plugin.path)]
    assert unlisted("`pytest_specdec/metrics.py`, `engine.metrics`", [plugin, engine]) == []
