"""merge_settings.project_value: the merge's --summary-rows from the project as a run started in the
merge's folder finds it, stopping only where the value it needs cannot be known. The shards' own
cases (a value set in each file, a malformed one) are in test_shard_merge.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.merge_settings import project_value


def _project(tmp_path: Path, files: dict[str, str], folder: str = ".") -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    return tmp_path / folder


def test_a_merge_in_a_subfolder_takes_the_projects_setting(tmp_path):
    for text in ("[tool.pytest.ini_options]\nspecdec_summary_rows = 7\n", "[tool.specdec]\nsummary_rows = 7\n"):
        assert project_value("summary_rows", None, _project(tmp_path, {"pyproject.toml": text}, "a/b")) == 7


@pytest.mark.parametrize("files", [
    {"pyproject.toml": "[tool.pytest.ini_options]\nspecdec_summary_rows = 7\n[tool.other]\nx = = 1\n"},
    {"pytest.ini": "[pytest]\n", "specdec.toml": "summary_rows = = 7\n"},
    {"pytest.ini": "[pytest]\n", "specdec.toml/inside": ""},
])
def test_a_settings_file_that_cannot_be_read_stops_the_merge_only_where_its_value_is_needed(tmp_path, files):
    """Unreadable, the project's value is unknowable: without the flag the merge stops (folding at 50
    would be the silent default this setting ended), saying the flag merges without it; with the
    flag nothing in the file is needed, and it stopped all the same."""
    folder = _project(tmp_path, files)
    assert project_value("summary_rows", 4, folder) == 4
    with pytest.raises(SpecdecUsageError) as info:
        project_value("summary_rows", None, folder)
    assert str(info.value).endswith("(or pass --summary-rows to the merge, which then reads no project setting)")


def test_a_settings_file_pytest_passes_over_that_sets_it_stops_the_merge_as_it_stops_a_run(tmp_path):
    """A `[tool.specdec]` below a pytest.ini: a run started there stops naming both (config_root.py),
    while the merge silently took the folder above's value (or 50) and has no -c to choose with."""
    folder = _project(tmp_path, {"pytest.ini": "[pytest]\nspecdec_summary_rows = 9\n",
                                 "sub/pyproject.toml": "[tool.specdec]\nsummary_rows = 7\n"}, "sub")
    with pytest.raises(SpecdecUsageError) as info:
        project_value("summary_rows", None, folder)
    assert str(info.value) == (
        f"{folder / 'pyproject.toml'} sets summary_rows but is not read: pytest chose the config file "
        f"{tmp_path / 'pytest.ini'} above it, so a run started here stops on it; pass --summary-rows to the merge, "
        f"or give {folder} a pytest config file (a pytest.ini, or a [tool.pytest.ini_options] table in its "
        "pyproject.toml) as a run's error says")
    assert project_value("summary_rows", 4, folder) == 4
    (folder / "pyproject.toml").write_text("[tool.specdec]\nbaseline_dir = 'b'\n")  # sets no summary_rows
    assert project_value("summary_rows", None, folder) == 9
