"""scripts/lowest-check.sh's reading of pyproject.toml: which requirement strings it pins to their
lower bound (the lowest end) or keeps as `>=` for `pip install -U` (the newest end). A regex read
`name>=X` only, so a bound written `"aiohttp >= 3.9.0"`, a range `"x>=1.2,<3"` or one with extras
`"pkg[extra]>=1"` ended the check with "declares no lower bound".

The tests run the script's own Python (its heredoc) on a pyproject.toml of their own, as the
script runs it in its fresh venv; nothing is installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "lowest-check.sh"
WANTED = ("pytest", "tomli", "aiohttp", "filelock", "psutil", "prometheus_client", "pytest-benchmark",
          "pytest-xdist", "pytest-timeout", "hypothesis", "matplotlib", "huggingface_hub")


def _pins(tmp_path: Path, pyproject: str, hide_packaging: bool = False,
          end: str = "lowest") -> subprocess.CompletedProcess:
    found = re.search(r"<<'EOF'\n(.*?)\nEOF\n", SCRIPT.read_text(), re.S)
    assert found, "lowest-check.sh has no heredoc of Python that reads pyproject.toml"
    (tmp_path / "pyproject.toml").write_text(pyproject)
    env = dict(os.environ)
    if hide_packaging:  # as in the script's fresh venv, where only pip's copy of packaging is
        (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['packaging'] = None\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", found.group(1), end], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def _project(*requirements: str) -> str:
    rest = [f'"{name}>=1.0"' for name in WANTED
            if not any(re.match(rf"{re.escape(name)}(?![\w.-])", r) for r in requirements)]
    return "[project]\ndependencies = [\n" + ",\n".join([*map('"{}"'.format, requirements), *rest]) + "\n]\n"


def test_bounds_with_spaces_ranges_extras_and_markers_are_pinned(tmp_path):
    run = _pins(tmp_path, _project("aiohttp >= 3.9.0", "filelock>=3.12,<4", "pytest-benchmark[histogram]>=4.0",
                                   "tomli >= 1.1 ; python_version < '3.11'", "psutil<7,>=5.9"))
    assert run.returncode == 0, run.stderr
    pins = run.stdout.splitlines()
    for pin in ("aiohttp==3.9.0", "filelock==3.12", "pytest-benchmark[histogram]==4.0",
                'tomli==1.1; python_version < "3.11"', "psutil==5.9", "pytest==1.0"):
        assert pin in pins, pins
    assert len(pins) == len(WANTED)


def test_the_projects_own_bounds_are_read_where_only_pips_copy_of_packaging_imports(tmp_path):
    project = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    run = _pins(tmp_path, project, hide_packaging=True)
    assert run.returncode == 0, run.stderr
    pins = run.stdout.splitlines()
    assert len(pins) == len(WANTED) and "pytest==8.4" in pins, pins
    assert 'tomli==1.1; python_version < "3.11"' in pins, pins


def test_a_requirement_with_no_lower_bound_is_named(tmp_path):
    run = _pins(tmp_path, _project("hypothesis", "matplotlib<4"))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "lowest-check: pyproject.toml declares no lower bound for ['hypothesis', 'matplotlib']: update the "
        "list in scripts/lowest-check.sh"), run.stderr


def test_the_newest_end_keeps_each_lower_bound_for_pip_install_u(tmp_path):
    run = _pins(tmp_path, _project("aiohttp >= 3.9.0", "tomli >= 1.1 ; python_version < '3.11'"), end="newest")
    assert run.returncode == 0, run.stderr
    pins = run.stdout.splitlines()
    assert "aiohttp>=3.9.0" in pins and 'tomli>=1.1; python_version < "3.11"' in pins, pins
    assert not [pin for pin in pins if "==" in pin], pins


def test_the_newest_end_keeps_a_requirements_upper_bound_and_exclusions(tmp_path):
    """The newest end printed `name>=X` alone, so a range `"filelock>=3.12,<4"` lost its `<4` and
    `pip install -U` took a release the project declares it does not run on; each requirement's
    whole specifier is kept, which gives the newest release it allows."""
    run = _pins(tmp_path, _project("filelock>=3.12,<4", "aiohttp >= 3.9.0, != 3.10.0",
                                   "tomli >= 1.1 ; python_version < '3.11'"), end="newest")
    assert run.returncode == 0, run.stderr
    pins = {re.split(r"[<>=!;\[]", pin, maxsplit=1)[0]: pin for pin in run.stdout.splitlines()}
    assert sorted(pins["filelock"].removeprefix("filelock").split(",")) == ["<4", ">=3.12"], pins
    assert sorted(pins["aiohttp"].removeprefix("aiohttp").split(",")) == ["!=3.10.0", ">=3.9.0"], pins
    assert pins["tomli"] == 'tomli>=1.1; python_version < "3.11"', pins
