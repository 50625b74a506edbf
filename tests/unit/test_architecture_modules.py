"""docs/ARCHITECTURE.md names every module of the plugin (`pytest_specdec/*.py`, `servers/*.py`), so
a maintainer looking for where a thing lives finds it there: a module added without its line reads
as if it did not exist. The engine and `specdec_kernels` are documented by their interfaces (the
engine's flags, the kernels' API), which tests/engine/test_cli.py and the kernels' tests hold."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ARCHITECTURE.md"


def unlisted(page: str, modules: list[Path]) -> list[str]:
    """The modules the page names neither as `name.py` nor by one of their names (`name.attr`)."""
    return [str(path.relative_to(ROOT)) for path in modules
            if not re.search(rf"(?<![\w.])(?:{re.escape(path.stem)}\.py\b|`{re.escape(path.stem)}\.\w)", page)]


def plugin_modules() -> list[Path]:
    return sorted(path for folder in ("pytest_specdec", "pytest_specdec/servers")
                  for path in (ROOT / folder).glob("*.py") if path.name != "__init__.py")


def test_every_plugin_module_is_named_in_the_architecture_page():
    assert unlisted(PAGE.read_text(), plugin_modules()) == []


def test_a_module_left_out_is_found():
    page = PAGE.read_text()
    cut = "\n".join(line for line in page.splitlines() if "`suggest.py`" not in line)
    assert unlisted(cut, plugin_modules()) == ["pytest_specdec/suggest.py"]
