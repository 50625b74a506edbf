"""baselines: file schema, atomic merging saves, distributions, reading version-1 files."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import tempfile

import pytest

from lock_support import held_by_another_process
from pytest_specdec.baselines import (
    FORMAT,
    POOLED_RUNS,
    VERSION,
    BaselineEntry,
    baseline_path,
    collect_versions,
    git_commit,
    load_baselines,
    save_baselines,
)
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.metrics import MetricValue

TID = "tests/bench/test_generation.py::test_generation[ddtree-tp1-b16-chat]"


def mv(name="output_tok_s", value=100.0, direction="higher", spread=0.0, samples=16, deterministic=False):
    return MetricValue(name, value, direction, spread, samples, deterministic)


def entry(value=100.0, direction="higher", spread=0.0, deterministic=False):
    return BaselineEntry(value=value, direction=direction, spread=spread, samples=16, deterministic=deterministic)


def test_baseline_path(tmp_path):
    assert baseline_path(tmp_path, "cpu") == tmp_path / "cpu.json"


def test_collect_versions_reads_metadata_without_importing_torch():
    import sys

    had_torch = "torch" in sys.modules
    versions = collect_versions()
    assert versions["pytest-specdec"]
    assert ("torch" in sys.modules) == had_torch


def test_git_commit_inside_and_outside_a_repository(tmp_path):
    here = git_commit(os.path.dirname(__file__))
    assert here is None or len(here.split("-")[0]) == 40
    assert git_commit(tmp_path) is None


# ------------------------------------------------------------------ save and load


def test_the_file_keeps_the_parts_of_the_setups_its_entries_measured(tmp_path):
    """So a run of another setup can name the part that changed; parts no entry uses any more go."""
    from pytest_specdec.fingerprint import fingerprint

    path = tmp_path / "cpu.json"
    first, second = fingerprint({"model": "a"}), fingerprint({"model": "b"})
    save_baselines(path, "cpu", {"a": [mv()], "b": [mv()]}, versions={},
                   fingerprints={"a": first, "b": "0123456789abcdef"})
    assert load_baselines(path, "cpu").setups == {first.digest: {"model": "a"}}
    save_baselines(path, "cpu", {"a": [mv()]}, versions={}, fingerprints={"a": second})
    loaded = load_baselines(path, "cpu")
    assert loaded.setups == {second.digest: {"model": "b"}}
    assert loaded.get("a", "output_tok_s").fingerprint == second.digest
    assert loaded.get("b", "output_tok_s").fingerprint == "0123456789abcdef"

    doc = json.loads(path.read_text())
    doc["setups"] = {second.digest: "model b"}
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecdecUsageError, match="'setups' must map fingerprint digests to objects"):
        load_baselines(path, "cpu")



def test_save_then_load_round_trip(tmp_path):
    path = tmp_path / "baselines" / "cpu.json"
    timed = MetricValue("ttft_ms", 12.0, "lower", distribution=(11.0, 12.0, 13.5), cpu_share=0.5)
    saved = save_baselines(path, "cpu", {TID: [mv(spread=2.5), timed]},
                           versions={"pytest-specdec": "0.1.0", "torch": "2.13.0"}, commit="abc123",
                           date="2026-11-30T00:00:00+00:00")
    assert len(saved) == 2
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT and doc["version"] == VERSION and doc["hardware_key"] == "cpu"
    stored = doc["entries"][TID]["output_tok_s"]
    assert stored == {"value": 100.0, "direction": "higher", "spread": 2.5, "samples": 16, "deterministic": False,
                      "date": "2026-11-30T00:00:00+00:00", "versions": {"pytest-specdec": "0.1.0", "torch": "2.13.0"},
                      "commit": "abc123", "distribution": [], "cpu_share": None, "save_sizes": []}
    loaded = load_baselines(path, "cpu")
    assert loaded.get(TID, "ttft_ms").value == 12.0
    assert loaded.get(TID, "ttft_ms").distribution == (11.0, 12.0, 13.5) and loaded.get(TID, "ttft_ms").calibrated
    assert loaded.get(TID, "ttft_ms").direction == "lower"
    assert loaded.get(TID, "nope") is None and loaded.get("other", "ttft_ms") is None
    assert loaded.to_json() == doc


def test_an_entry_saved_with_a_former_key_is_still_read(tmp_path):
    """Version 2 entries once carried 'calibrated' (what cpu_share says now)."""
    path = tmp_path / "cpu.json"
    path.write_text(_one_entry(calibrated=True))
    assert load_baselines(path, "cpu").get("t", "output_tok_s").calibrated


def test_version_1_files_are_still_read(tmp_path):
    """Files saved before distributions: values and spreads only, gated on those (gate.py)."""
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu", "entries": {
        TID: {"output_tok_s": {"value": 5.0, "direction": "higher", "spread": 0.5, "samples": 8}}}}))
    entry = load_baselines(path, "cpu").get(TID, "output_tok_s")
    assert (entry.value, entry.spread, entry.distribution, entry.calibrated) == (5.0, 0.5, (), False)


def test_a_bad_distribution_is_a_usage_error(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 2, "hardware_key": "cpu", "entries": {
        TID: {"ttft_ms": {"value": 5.0, "direction": "lower", "distribution": [1.0, "x"]}}}}))
    with pytest.raises(SpecdecUsageError, match="'distribution' must be a list of finite numbers"):
        load_baselines(path, "cpu")


def test_save_merges_and_never_drops_other_entries(tmp_path):
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"a": [mv(value=1.0), mv("accept_length", 3.0)], "b": [mv(value=2.0)]}, versions={})
    save_baselines(path, "cpu", {"a": [mv(value=5.0)], "c": [mv(value=7.0)]}, versions={})
    loaded = load_baselines(path, "cpu")
    assert loaded.get("a", "output_tok_s").value == 5.0  # re-measured: replaced
    assert loaded.get("a", "accept_length").value == 3.0  # same test, other metric: kept
    assert loaded.get("b", "output_tok_s").value == 2.0  # other test: kept
    assert loaded.get("c", "output_tok_s").value == 7.0
    # no temp files left behind; the lock stays beside the file (hidden, git-ignored)
    assert sorted(os.listdir(tmp_path)) == [".cpu.json.lock", "cpu.json"]


def test_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"a": [mv(value=1.0)]}, versions={})
    before = path.read_text()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        save_baselines(path, "cpu", {"a": [mv(value=2.0)]}, versions={})
    assert path.read_text() == before
    assert [name for name in os.listdir(tmp_path) if name != ".cpu.json.lock"] == ["cpu.json"]


def test_a_save_killed_before_its_rename_leaves_nothing_behind_the_next_save(tmp_path):
    """A save killed between writing its temporary file and the rename (SIGKILL, OOM, power)
    left the file intact but its hidden temporary sibling there for good (untracked in git)."""
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"a": [mv(value=1.0)]}, versions={})
    torn = tmp_path / ".cpu.json.k1ll3d.tmp"
    torn.write_text('{"format": "pytest-specdec-base')
    other = tmp_path / ".other.json.k1ll3d.tmp"  # another file's: not this save's to remove
    other.write_text("{")
    save_baselines(path, "cpu", {"b": [mv(value=2.0)]}, versions={})
    assert not torn.exists() and other.exists()
    assert set(load_baselines(path, "cpu").entries) == {"a", "b"}


def test_the_lock_is_beside_the_file_and_saving_keeps_its_mode(tmp_path, monkeypatch):
    """No predictable lock path in a shared /tmp (another user could hold it), and a saved
    baseline keeps the mode it had (mkstemp's private 0600 would hide it from the team)."""
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    path = tmp_path / "baselines" / "cpu.json"
    old_umask = os.umask(0o022)
    try:
        save_baselines(path, "cpu", {"a": [mv(value=1.0)]}, versions={})
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # a new file: 0666 under the umask
        path.chmod(0o664)
        save_baselines(path, "cpu", {"a": [mv(value=2.0)]}, versions={})
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664
    assert sorted(os.listdir(path.parent)) == [".cpu.json.lock", "cpu.json"]
    assert os.listdir(shared_tmp) == []


def _save_worker(path: str, i: int) -> None:
    for j in range(5):
        save_baselines(path, "cpu", {f"test{i}": [mv(value=float(j))], f"shared{j}": [mv(f"m{i}", 1.0)]},
                       versions={})


def test_a_save_through_a_symbolic_link_updates_the_file_it_points_to(tmp_path):
    """The rename replaced the link with a file of its own: the shared file it pointed to kept the
    old entries, and the link was gone."""
    shared = tmp_path / "shared" / "cpu.json"
    save_baselines(shared, "cpu", {"a": [mv(value=1.0)]})
    (tmp_path / "baselines").mkdir()
    link = tmp_path / "baselines" / "cpu.json"
    link.symlink_to(os.path.relpath(shared, link.parent))
    save_baselines(link, "cpu", {"b": [mv(value=2.0)]})
    assert link.is_symlink() and sorted(load_baselines(shared, "cpu").entries) == ["a", "b"]
    assert not list((tmp_path / "baselines").glob(".*"))  # the lock is beside the file written
    from pytest_specdec import durations

    durations.save(shared.with_name("durations.json"), {"ar-tp1": 1.0})
    (tmp_path / "baselines" / "durations.json").symlink_to(shared.with_name("durations.json"))
    durations.save(tmp_path / "baselines" / "durations.json", {"ar-tp2": 2.0})
    assert durations.load(shared.with_name("durations.json")) == {"ar-tp1": 1.0, "ar-tp2": 2.0}


@pytest.mark.parametrize("field", ["distribution", "cpu_share", "spread"])
def test_a_figure_that_is_not_finite_is_not_saved(tmp_path, field):
    """JSON writes NaN and Infinity, and the reader refuses them: such a save left a file every later
    run stopped on."""
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"a": [mv(value=1.0)]})
    bad = {"distribution": (1.0, float("nan")), "cpu_share": float("inf"), "spread": float("inf")}[field]
    metric = MetricValue("output_tok_s", 2.0, "higher", **{field: bad})
    with pytest.raises(SpecdecUsageError, match=r"^b output_tok_s: .* is (nan|inf), which a baseline cannot "
                                                r"hold; nothing was saved into .*cpu.json, which keeps its entries"):
        save_baselines(path, "cpu", {"b": [metric]})
    assert sorted(load_baselines(path, "cpu").entries) == ["a"]


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "cpu.json")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_save_worker, args=(path, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    loaded = load_baselines(path, "cpu")
    for i in range(4):
        assert loaded.get(f"test{i}", "output_tok_s").value == 4.0
        for j in range(5):
            assert loaded.get(f"shared{j}", f"m{i}") is not None
    assert len(loaded) == 4 + 5 * 4


def test_missing_file_is_empty(tmp_path):
    b = load_baselines(tmp_path / "absent.json", "cpu")
    assert len(b) == 0 and b.hardware_key == "cpu"


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", r"is not valid JSON \(line 1, column 2"),
        # the decoder's "Invalid control character at" ended in a dangling "at" and named no character
        ('{"format": "a\tb"}', r"\(line 1, column 14: a raw tab \(U\+0009\) inside a string, which JSON does not "
                                r"allow: write it as \\t\); fix it"),
        ("[" * 100_000 + "]" * 100_000, r"is not valid JSON \(line 1, column 1: nested too deeply"),
        ("[]", "is not a pytest-specdec baseline file"),
        ('{"format": "pytest-benchmark", "version": 1}', "is not a pytest-specdec baseline file"),
        (json.dumps({"format": FORMAT, "version": 99, "hardware_key": "cpu", "entries": {}}), "newer than"),
        (json.dumps({"format": FORMAT, "version": "1", "hardware_key": "cpu", "entries": {}}), "'version' must be"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "nvidia-h200-sm_90-x8", "entries": {}}),
         "belongs to hardware 'nvidia-h200-sm_90-x8', but this machine is 'cpu'"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu", "entries": []}), "'entries' must be"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu", "entries": {"t": 3}}), "entry 't'"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu",
                     "entries": {"t": {"m": {"value": "fast", "direction": "higher"}}}}), r"t m: 'value' must be"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu",
                     "entries": {"t": {"m": {"value": 1, "direction": "up"}}}}), "'direction' must be"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu",
                     "entries": {"t": {"m": {"value": 1, "direction": "higher", "spread": -1}}}}), "'spread' must be"),
        (json.dumps({"format": FORMAT, "version": 1, "hardware_key": "cpu",
                     "entries": {"t": {"m": {"value": 1, "direction": "higher", "samples": 0}}}}), "'samples' must be"),
    ],
)
def test_malformed_or_foreign_files_are_usage_errors(tmp_path, content, match):
    path = tmp_path / "cpu.json"
    path.write_text(content)
    with pytest.raises(SpecdecUsageError, match=match) as info:
        load_baselines(path, "cpu")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("twice", ["test", "metric"])
def test_a_key_given_twice_is_a_usage_error_not_the_last_one_read(tmp_path, twice):
    """A hand-merged file naming a test (or a figure) twice: JSON keeps the last object, so the
    first one's entries vanished without a word."""
    entry = '{"value": 10.0, "direction": "higher"}'
    if twice == "test":
        entries = f'"t": {{"output_tok_s": {entry}}}, "t": {{"tpot_ms": {entry.replace("higher", "lower")}}}'
    else:
        entries = f'"t": {{"output_tok_s": {entry}, "output_tok_s": {entry.replace("10.0", "20.0")}}}'
    path = tmp_path / "cpu.json"
    path.write_text(f'{{"format": "{FORMAT}", "version": {VERSION}, "hardware_key": "cpu", '
                    f'"entries": {{{entries}}}}}')
    key = "t" if twice == "test" else "output_tok_s"
    with pytest.raises(SpecdecUsageError, match=f"names '{key}' twice in one object") as info:
        load_baselines(path, "cpu")
    assert str(path) in str(info.value) and "--specdec-save-baseline" in str(info.value)


def _one_entry(**fields) -> str:
    entry = {"value": 10.0, "direction": "higher", "distribution": [9.0, 11.0], "cpu_share": 0.9,
             **fields}
    return json.dumps({"format": FORMAT, "version": VERSION, "hardware_key": "cpu",
                       "entries": {"t": {"output_tok_s": entry}}})


@pytest.mark.parametrize("fields, match", [
    ({"cpu_share": 0}, r"t output_tok_s: 'cpu_share' must be in \(0, 1\], got 0.0; fix it, or move it aside"),
    ({"cpu_share": -1}, r"'cpu_share' must be in \(0, 1\], got -1.0"),
    ({"cpu_share": 1.5}, r"'cpu_share' must be in \(0, 1\], got 1.5"),
    ({"runs": "x"}, r"t output_tok_s: 'runs' must be a positive integer, got 'x'; fix it, or move it aside"),
    ({"runs": 0}, r"'runs' must be a positive integer, got 0"),
    ({"save_sizes": [1]}, r"t output_tok_s: 'save_sizes' must list how many samples each pooled save "
                          r"contributed \(positive integers, oldest first, 2 in all as in 'distribution'\), "
                          r"got \[1\]; fix it, or move it aside"),
    ({"save_sizes": [1, 0, 1]}, r"'save_sizes' must list .* got \[1, 0, 1\]"),
    ({"save_sizes": [1, "1"]}, r"'save_sizes' must list .* got \[1, '1'\]"),
    ({"save_sizes": [True, True]}, r"'save_sizes' must list .* got \[True, True\]"),
    ({"save_sizes": 2}, r"'save_sizes' must list .* got 2;"),
    ({"save_sizes": [1, 1], "runs": 3}, r"'save_sizes' must list .*2 in all as in 'distribution', 3 saves "
                                        r"as in runs\), got \[1, 1\]"),
    ({"save_sizes": [], "distribution": [9.0]}, r"'save_sizes' must list .*1 in all.* got \[\]"),
    ({"value": -5}, r"t output_tok_s: 'value' must be >= 0, got -5.0; fix it, or move it aside"),
    ({"distribution": [9.0, -11.0]}, r"t output_tok_s: 'distribution' must hold samples >= 0, got "
                                     r"-11.0; fix it, or move it aside"),
    ({"deterministic": "false"}, r"t output_tok_s: 'deterministic' must be true or false, got "
                                 r"'false'; fix it, or move it aside"),
    ({"deterministic": 0}, r"'deterministic' must be true or false, got 0"),
    ({"distribution": {}}, r"'distribution' must be a list of finite numbers"),
    ({"versions": []}, r"'versions' must be an object, got \[\]"),
    ({"fingerprint": {"model": "m"}}, r"t output_tok_s: 'fingerprint' must be a digest string or null, got "
                                      r"\{'model': 'm'\}; fix it, or move it aside"),
    ({"determinstic": True}, r"t output_tok_s: unknown key 'determinstic'; did you mean 'deterministic'\? fix it"),
    ({"distrbution": [1.0]}, r"unknown key 'distrbution'; did you mean 'distribution'\?"),
    # a key like none of the format's: nothing reads it, and the user meant something by it
    ({"tolerance": "10%"}, r"t output_tok_s: unknown key 'tolerance': an entry holds only value, "
                           r"direction, .*nothing reads another key and a save would drop it; remove it"),
    ({"note": "x", "versions": {"pytest-specdec": "9.0"}},
     r"unknown key 'note'.* remove it \(a note belongs in the commit message\), or upgrade "
     r"pytest-specdec if 9.0, which saved the entry, is newer"),
])
def test_impossible_figures_in_an_entry_are_usage_errors(tmp_path, fields, match):
    path = tmp_path / "cpu.json"
    path.write_text(_one_entry(**fields))
    with pytest.raises(SpecdecUsageError, match=match) as info:
        load_baselines(path, "cpu")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("entry", [
    "not an object",
    {"value": "fast", "direction": "higher"},
    {"value": 10.0, "direction": "up"},
    {"value": 10.0, "direction": "higher", "spread": -1},
    {"value": 10.0, "direction": "higher", "samples": 0},
    {"value": 10.0, "direction": "higher", "versions": []},
    {"value": 10.0, "direction": "higher", "distribution": {}},
])
def test_each_broken_entry_names_the_fix(tmp_path, entry):
    """A broken entry of the baseline folder's file stops every run that reads it: each error
    says how to get past it, as the file's other errors do (these said only what was wrong)."""
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "hardware_key": "cpu",
                                "entries": {"t": {"output_tok_s": entry}}}))
    with pytest.raises(SpecdecUsageError) as info:
        load_baselines(path, "cpu")
    assert str(info.value).endswith("; fix it, or move it aside (or delete it) and save a new one "
                                    "with --specdec-save-baseline")


def test_an_entry_that_maps_no_metrics_names_the_fix(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "hardware_key": "cpu",
                                "entries": {"t": ["output_tok_s"]}}))
    with pytest.raises(SpecdecUsageError, match=r"entry 't' must map metric names to objects; fix it, "
                                                r"or move it aside"):
        load_baselines(path, "cpu")


@pytest.mark.parametrize("name, match", [
    ("entires", r"unknown top-level key 'entires'; did you mean 'entries'\? fix it"),
    ("comment", r"unknown top-level key 'comment': the file holds only format, version, "
                r"hardware_key, entries, setups and nothing reads another; remove it"),
])
def test_an_unknown_top_level_key_is_a_usage_error(tmp_path, name, match):
    """A misspelt 'entries' read as a file with no entries: every figure passed as new."""
    doc = json.loads(_one_entry())
    doc[name] = doc.pop("entries") if name == "entires" else "mine"
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecdecUsageError, match=match) as info:
        load_baselines(path, "cpu")
    assert str(path) in str(info.value)


def test_figures_that_can_be_measured_are_read(tmp_path):
    path = tmp_path / "cpu.json"
    # accept_rate 0 can be measured; an entry that gives no save sizes has saves of equal size
    path.write_text(_one_entry(value=0, cpu_share=1.0, distribution=[9.0, 11.0, 10.0], runs=3))
    assert load_baselines(path, "cpu").get("t", "output_tok_s").save_sizes == (1, 1, 1)
    doc = json.loads(_one_entry())
    doc["entries"]["t"] = {"my_fig": {"value": -5.0, "direction": "lower", "distribution": [-5.0]}}  # a user's figure
    path.write_text(json.dumps(doc))
    assert load_baselines(path, "cpu").get("t", "my_fig").value == -5.0


def test_the_same_measurement_saved_again_is_pooled_once(tmp_path):
    """A merge (or a resumed run) with --save-baseline run twice saves the same figures twice:
    the second save must not count their samples as a second run that agrees with the first."""
    path = tmp_path / "cpu.json"
    first = MetricValue("tpot_ms", 1.0, "lower", distribution=(0.9, 1.1), cpu_share=0.5)
    again = MetricValue("tpot_ms", 2.0, "lower", distribution=(1.9, 2.1), cpu_share=0.7)
    save_baselines(path, "cpu", {TID: [first]}, versions={}, fingerprints={TID: "f1"})
    save_baselines(path, "cpu", {TID: [again]}, versions={}, fingerprints={TID: "f1"})
    pooled = load_baselines(path, "cpu").get(TID, "tpot_ms")
    save_baselines(path, "cpu", {TID: [again]}, versions={}, fingerprints={TID: "f1"})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert entry == pooled
    assert (entry.runs, entry.distribution, entry.value) == (2, (0.9, 1.1, 1.9, 2.1), 2.0)
    # the same samples of another setup are another measurement: it replaces the entry
    save_baselines(path, "cpu", {TID: [again]}, versions={}, fingerprints={TID: "f2"})
    assert load_baselines(path, "cpu").get(TID, "tpot_ms").runs == 1

def test_a_measurement_saved_again_after_another_runs_save_is_pooled_once(tmp_path):
    """A merge with --save-baseline interrupted and run again after another run saved the same
    test: only the newest save was compared, so the merge's samples were pooled a second time."""
    path = tmp_path / "cpu.json"
    merged = MetricValue("tpot_ms", 1.0, "lower", distribution=(0.9, 1.1, 1.05))
    other = MetricValue("tpot_ms", 2.0, "lower", distribution=(1.9, 2.1, 2.05))
    save_baselines(path, "cpu", {TID: [merged]}, versions={}, fingerprints={TID: "f1"})
    save_baselines(path, "cpu", {TID: [other]}, versions={}, fingerprints={TID: "f1"})
    before = load_baselines(path, "cpu").get(TID, "tpot_ms")
    save_baselines(path, "cpu", {TID: [merged]}, versions={}, fingerprints={TID: "f1"})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert entry == before
    assert (entry.runs, entry.distribution, entry.value) == (2, (0.9, 1.1, 1.05, 1.9, 2.1, 2.05), 2.0)
    # samples that lie in the entry only in part are another measurement: pooled
    save_baselines(path, "cpu", {TID: [MetricValue("tpot_ms", 1.0, "lower", distribution=(1.05, 1.9, 2.0))]},
                   versions={}, fingerprints={TID: "f1"})
    assert load_baselines(path, "cpu").get(TID, "tpot_ms").runs == 3


def test_the_same_samples_with_another_figure_are_another_measurement(tmp_path):
    """Per-request accept lengths 1.5 and 2.0 of 3/2 and 4/2 tokens, then of 6/4 and 4/2: the same
    samples, another figure (7/4, then 10/6). Only the newest save's value tells the two apart;
    read as one save, the second was never pooled and the entry kept the first figure."""
    path = tmp_path / "cpu.json"
    for value in (1.75, 10 / 6):
        save_baselines(path, "cpu", {TID: [MetricValue("accept_length", value, "higher", distribution=(1.5, 2.0))]},
                       versions={}, fingerprints={TID: "f1"})
    entry = load_baselines(path, "cpu").get(TID, "accept_length")
    assert (entry.runs, entry.value) == (2, 10 / 6)


def test_saves_of_unequal_sizes_are_pooled_whole(tmp_path):
    """A workload's request count changed between saves: the window took the newest save's size
    times the saves kept, so an older save was cut in two (or one too many kept)."""
    path = tmp_path / "cpu.json"
    for size in (2, 3, 4, 1):
        sample = MetricValue("tpot_ms", float(size), "lower", distribution=tuple(size + i / 10 for i in range(size)))
        save_baselines(path, "cpu", {TID: [sample]}, versions={})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert entry.distribution == (3, 3.1, 3.2, 4, 4.1, 4.2, 4.3, 1)
    assert (entry.save_sizes, entry.runs) == ((3, 4, 1), 3)
    assert json.loads(path.read_text())["entries"][TID]["tpot_ms"]["save_sizes"] == [3, 4, 1]


def test_a_measurement_saved_again_among_saves_of_unequal_sizes_is_pooled_once(tmp_path):
    """A merge of 3 requests a test saved, another run's save of 2 after it, then the merge run
    again: the pool had kept the merge's last 2 samples only, so its rerun was pooled a second time."""
    path = tmp_path / "cpu.json"
    merged = MetricValue("tpot_ms", 1.0, "lower", distribution=(0.9, 1.1, 1.05))
    other = MetricValue("tpot_ms", 2.0, "lower", distribution=(1.9, 2.1))
    save_baselines(path, "cpu", {TID: [merged]}, versions={}, fingerprints={TID: "f1"})
    save_baselines(path, "cpu", {TID: [other]}, versions={}, fingerprints={TID: "f1"})
    before = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert before.distribution == (0.9, 1.1, 1.05, 1.9, 2.1)
    assert before.save_sizes == (3, 2)
    save_baselines(path, "cpu", {TID: [merged]}, versions={}, fingerprints={TID: "f1"})
    assert load_baselines(path, "cpu").get(TID, "tpot_ms") == before


def test_samples_that_straddle_two_saves_are_another_measurement(tmp_path):
    """Runs of samples were searched at any offset: a measurement whose samples happened to
    span the end of one save and the start of the next was taken as already pooled and dropped."""
    path = tmp_path / "cpu.json"
    for distribution in ((0.9, 1.1, 1.05), (1.9, 2.1), (1.05, 1.9)):
        save_baselines(path, "cpu", {TID: [MetricValue("tpot_ms", distribution[0], "lower",
                                                       distribution=distribution)]},
                       versions={}, fingerprints={TID: "f1"})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert (entry.value, entry.runs) == (1.05, 3)
    assert entry.save_sizes == (3, 2, 2)


@pytest.mark.parametrize("runs, samples, sizes", [
    (3, 6, (2, 2, 2)),  # equal-sized saves: what version 3 pooled when the count stayed
    (2, 5, (5,)),  # the samples do not divide evenly: one save, never a save cut in two
    (3, 0, ()),
])
def test_version_3_entries_read_their_saves_and_are_rewritten_in_this_version(tmp_path, runs, samples, sizes):
    """Version 3 kept the count of saves only: its saves are taken as equal-sized where the
    samples divide evenly among them, else as one save; the next save writes save_sizes for the
    entries it saves, and the count for the others, whose sizes stay a guess."""
    path = tmp_path / "cpu.json"
    entry = {"value": 1.0, "direction": "lower", "distribution": [1.0 + i / 10 for i in range(samples)],
             "runs": runs, "nodeid": TID}
    path.write_text(json.dumps({"format": FORMAT, "version": 3, "hardware_key": "cpu",
                                "entries": {"test_generation[ddtree-tp1-b16-chat]": {
                                    "tpot_ms": entry, "ttft_ms": entry}}}))
    read = load_baselines(path, "cpu").get("test_generation[ddtree-tp1-b16-chat]", "tpot_ms")
    assert read.save_sizes == sizes and read.runs == max(1, len(sizes))
    save_baselines(path, "cpu", {"test_generation[ddtree-tp1-b16-chat]": [
        MetricValue("tpot_ms", 9.0, "lower", distribution=(9.0,))]}, versions={}, nodeids={
        "test_generation[ddtree-tp1-b16-chat]": TID})
    doc = json.loads(path.read_text())
    assert doc["version"] == VERSION == 4
    kept = doc["entries"]["test_generation[ddtree-tp1-b16-chat]"]
    assert kept["tpot_ms"]["save_sizes"] == [*sizes[-(POOLED_RUNS - 1):], 1] and "runs" not in kept["tpot_ms"]
    if samples:
        assert kept["ttft_ms"]["runs"] == runs and "save_sizes" not in kept["ttft_ms"]
    else:  # no samples: nothing to guess
        assert kept["ttft_ms"]["save_sizes"] == [] and "runs" not in kept["ttft_ms"]
    assert load_baselines(path, "cpu").get("test_generation[ddtree-tp1-b16-chat]", "ttft_ms").save_sizes == sizes


@pytest.mark.parametrize("older, newest", [
    ((0.9, 1.1, 1.05), (1.9, 2.1)),  # 5 samples of 2 saves: read as one save
    ((0.9,), (1.9, 2.1, 2.05)),  # 4 samples of 2 saves: read as two of 2, the newest cut in two
])
def test_the_newest_save_of_a_version_3_entry_saved_again_is_pooled_once(tmp_path, older, newest):
    """A merge saved by an earlier release and run again after the upgrade: version 3 kept no save
    sizes, but its newest save lies at the end of the samples, with the entry's value, as that
    release found it; guessed boundaries missed it and pooled its samples a second time."""
    path = tmp_path / "cpu.json"
    key = "test_generation[ddtree-tp1-b16-chat]"
    entry = {"value": newest[0], "direction": "lower", "distribution": [*older, *newest], "runs": 2,
             "nodeid": TID, "fingerprint": "f1"}
    path.write_text(json.dumps({"format": FORMAT, "version": 3, "hardware_key": "cpu",
                                "entries": {key: {"tpot_ms": entry}}}))
    before = load_baselines(path, "cpu").get(key, "tpot_ms")
    save_baselines(path, "cpu", {key: [MetricValue("tpot_ms", newest[0], "lower", distribution=newest)]},
                   versions={}, fingerprints={key: "f1"}, nodeids={key: TID})
    after = load_baselines(path, "cpu").get(key, "tpot_ms")
    assert after.distribution == before.distribution == (*older, *newest)


@pytest.mark.parametrize("older, newest", [
    ((0.9, 1.1, 1.05), (1.9, 2.1)),  # 5 samples of 2 saves: read as one save
    ((0.9,), (1.9, 2.1, 2.05)),  # 4 samples of 2 saves: read as two of 2, the newest cut in two
])
def test_a_version_3_entry_stays_guessed_when_another_test_saves_first(tmp_path, older, newest):
    """A merge of two shards of one key, saved by an earlier release and run again after the
    upgrade: the first shard's save rewrites the file before the second shard's tests are saved
    again. Its guessed save sizes, written as if recorded, lost the guess, and the second shard's
    newest save (cut or missed by them) was pooled a second time."""
    path = tmp_path / "cpu.json"
    key, other = "test_generation[ddtree-tp1-b16-chat]", "test_generation[ar-tp1-b16-chat]"
    entry = {"value": newest[0], "direction": "lower", "distribution": [*older, *newest], "runs": 2,
             "nodeid": TID, "fingerprint": "f1"}
    path.write_text(json.dumps({"format": FORMAT, "version": 3, "hardware_key": "cpu",
                                "entries": {key: {"tpot_ms": entry}}}))
    before = load_baselines(path, "cpu").get(key, "tpot_ms")
    other_id = TID.replace("ddtree", "ar")
    save_baselines(path, "cpu", {other: [MetricValue("tpot_ms", 3.0, "lower", distribution=(3.0,))]},
                   versions={}, fingerprints={other: "f2"}, nodeids={other: other_id})
    save_baselines(path, "cpu", {key: [MetricValue("tpot_ms", newest[0], "lower", distribution=newest)]},
                   versions={}, fingerprints={key: "f1"}, nodeids={key: TID})
    after = load_baselines(path, "cpu").get(key, "tpot_ms")
    assert after.distribution == before.distribution == (*older, *newest)


def test_save_refuses_to_overwrite_a_foreign_file(tmp_path):
    path = tmp_path / "cpu.json"
    save_baselines(path, "nvidia-h200-sm_90-x8", {"a": [mv()]}, versions={})
    before = path.read_text()
    with pytest.raises(SpecdecUsageError, match="belongs to hardware"):
        save_baselines(path, "cpu", {"a": [mv()]}, versions={})
    assert path.read_text() == before


def test_timing_figures_pool_the_samples_of_the_last_saves(tmp_path):
    """A shared machine's figure moves between runs: the entry keeps the last three saves'
    samples (newest last), so the gate sees that spread; the value is this save's."""
    path = tmp_path / "cpu.json"
    for run in range(1, 5):
        sample = MetricValue("tpot_ms", float(run), "lower", distribution=(run, run + 0.5), cpu_share=run / 10)
        save_baselines(path, "cpu", {TID: [sample, mv("accept_length", 3.0, deterministic=True)]}, versions={})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert entry.value == 4.0 and entry.runs == 3
    assert entry.distribution == (2, 2.5, 3, 3.5, 4, 4.5)
    # a running mean as runs are pooled: ((0.1 + 0.2) / 2 * 2 + 0.3) / 3 = 0.2, then (0.2 * 2 + 0.4) / 3
    assert entry.cpu_share == pytest.approx(0.8 / 3)
    assert load_baselines(path, "cpu").get(TID, "accept_length").runs == 1  # exact figures: this run's
    # another kind of figure (no longer calibrated) starts again
    save_baselines(path, "cpu", {TID: [MetricValue("tpot_ms", 9.0, "lower", distribution=(9, 9))]}, versions={})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert (entry.runs, entry.distribution, entry.calibrated) == (1, (9, 9), False)


def test_an_entry_saved_under_an_earlier_releases_fingerprint_pools_with_the_same_setup(tmp_path):
    """The fingerprint's model part changed meaning (what the backend serves): an entry an earlier
    release saved for the same setup keeps its samples, as a save of the same setup does."""
    from pytest_specdec.fingerprint import Fingerprint

    path = tmp_path / "cpu.json"
    first = MetricValue("tpot_ms", 1.0, "lower", distribution=(1, 1.5))
    save_baselines(path, "cpu", {TID: [first]}, versions={}, fingerprints={TID: "0123456789abcdef"})
    now = Fingerprint("fedcba9876543210", {"model": {"preset": "tiny"}}, former=("0123456789abcdef",))
    second = MetricValue("tpot_ms", 2.0, "lower", distribution=(2, 2.5))
    save_baselines(path, "cpu", {TID: [second]}, versions={}, fingerprints={TID: now})
    entry = load_baselines(path, "cpu").get(TID, "tpot_ms")
    assert (entry.runs, entry.distribution, entry.fingerprint) == (2, (1, 1.5, 2, 2.5), "fedcba9876543210")


@pytest.mark.parametrize("fields, match", [
    ({"value": 10 ** 400}, r"t output_tok_s: 'value' must be a finite number, got inf"),
    ({"cpu_share": 10 ** 400}, r"'cpu_share' must be a finite number, got inf"),
    ({"distribution": [10 ** 400]}, r"'distribution' must be a list of finite numbers"),
    ({"runs": 10 ** 5000}, r"'runs' must be a positive integer, got inf"),
    ({"save_sizes": [10 ** 5000]}, r"'save_sizes' must list .* got \[inf\]"),
])
def test_a_number_too_long_for_a_float_is_a_usage_error_not_a_crash(tmp_path, fields, match):
    """A hand edit's stray digits raised OverflowError (or ValueError past Python's limit on
    integer digits) from the checks, a traceback instead of the entry and the fix."""
    import sys

    path = tmp_path / "cpu.json"
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # to write the file; the reader runs under the default limit
    try:
        text = _one_entry(**fields)
    finally:
        sys.set_int_max_str_digits(limit)
    path.write_text(text)
    with pytest.raises(SpecdecUsageError, match=match) as info:
        load_baselines(path, "cpu")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("damage, why", [
    (lambda path: path.write_bytes(b'{"format": "pytest-specdec-baselines",\n"x": "\xe9"}'),
     r"line 2 is not UTF-8 \(byte 0xe9\)"),
    (lambda path: path.mkdir(), "Is a directory"),
    (lambda path: path.symlink_to(path.name), "Too many levels of symbolic links"),
])
def test_a_file_that_cannot_be_read_names_why_and_the_fix(tmp_path, damage, why):
    """It said the codec's or the OS's message ("[Errno 21] Is a directory: '...'", "can't decode
    byte 0xe9 in position 46") and no fix."""
    path = tmp_path / "cpu.json"
    damage(path)
    with pytest.raises(SpecdecUsageError, match=rf"^baseline file {path} cannot be read: {why}; fix it, or move "
                                                r"it aside \(or delete it\) and save a new one with "
                                                r"--specdec-save-baseline$"):
        load_baselines(path, "cpu")


def test_an_empty_file_says_so(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text("\n")
    with pytest.raises(SpecdecUsageError, match=r"cpu.json is empty .*; fix it, or move it aside"):
        load_baselines(path, "cpu")


def test_a_baseline_file_an_editor_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Some Windows editors save UTF-8 with a byte-order mark; the JSON itself is intact, so the
    file was refused as 'not valid JSON' for a character nobody can see."""
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"a": [mv(value=5.0)]}, versions={})
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_baselines(path, "cpu").get("a", "output_tok_s").value == 5.0
    save_baselines(path, "cpu", {"b": [mv(value=6.0)]}, versions={})  # a save merges into it
    assert sorted(load_baselines(path, "cpu").entries) == ["a", "b"]


@pytest.mark.parametrize("text, why", [
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON (line 1: nested too deeply to read)"),
    ('{"format": "pytest-specdec-durations", "version": 1, "configurations": {"ar-tp1": ' + "9" * 5000 + "}}",
     "ar-tp1: inf is not a number of seconds"),
])
def test_a_durations_file_json_reads_only_with_another_error_is_a_usage_error(tmp_path, text, why):
    from pytest_specdec import durations

    path = tmp_path / "durations.json"
    path.write_text(text)
    with pytest.raises(SpecdecUsageError) as info:
        durations.load(path)
    assert why in str(info.value) and "fix or delete it" in str(info.value)


def test_a_durations_file_with_a_byte_order_mark_is_read(tmp_path):
    from pytest_specdec import durations

    path = tmp_path / "durations.json"
    durations.write(path, {"ar-tp1": 12.5})
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert durations.load(path) == {"ar-tp1": 12.5}


# ------------------------------------------------------------------ the saving test's node id


def test_an_entry_keeps_the_node_id_of_the_test_that_saved_it(tmp_path):
    from pytest_specdec.baselines import other_test

    path = tmp_path / "cpu.json"
    saved = save_baselines(path, "cpu", {"test_gen[p]": [mv()]}, versions={},
                           nodeids={"test_gen[p]": "a/test_x.py::test_gen[p]"})
    doc = json.loads(path.read_text())
    assert doc["version"] == VERSION >= 3
    assert doc["entries"]["test_gen[p]"]["output_tok_s"]["nodeid"] == "a/test_x.py::test_gen[p]"
    loaded = load_baselines(path, "cpu")
    assert loaded.get("test_gen[p]", "output_tok_s") == saved.get("test_gen[p]", "output_tok_s")
    assert other_test(loaded, "test_gen[p]", "a/test_x.py::test_gen[p]") is None
    assert other_test(loaded, "test_gen[p]", "b/test_x.py::test_gen[p]") == "a/test_x.py::test_gen[p]"
    # a record that kept no node id (its test id stands in) names no file: nothing to tell apart
    assert other_test(loaded, "test_gen[p]", "test_gen[p]") is None


def test_one_test_seen_from_another_rootdir_keeps_its_entries(tmp_path):
    """Node ids are relative to pytest's rootdir, which moves with where a run starts and which
    ini file it finds: the same test is not another test's."""
    from pytest_specdec.baselines import other_test

    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"test_gen[p]": [mv()]}, versions={},
                   nodeids={"test_gen[p]": "tests/bench/test_x.py::test_gen[p]"})
    loaded = load_baselines(path, "cpu")
    assert other_test(loaded, "test_gen[p]", "bench/test_x.py::test_gen[p]") is None
    assert other_test(loaded, "test_gen[p]", "proj/tests/bench/test_x.py::test_gen[p]") is None
    assert other_test(loaded, "test_gen[p]", "other/test_x.py::test_gen[p]") == "tests/bench/test_x.py::test_gen[p]"
    assert other_test(loaded, "test_gen[p]", "tests/bench/ytest_x.py::test_gen[p]") is not None


def test_a_save_from_another_file_of_the_same_test_name_writes_nothing(tmp_path):
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"test_gen[p]": [mv(value=1.0)]}, versions={},
                   nodeids={"test_gen[p]": "a/test_x.py::test_gen[p]"})
    before = path.read_bytes()
    with pytest.raises(SpecdecUsageError) as info:
        save_baselines(path, "cpu", {"test_gen[p]": [mv(value=2.0)], "other": [mv()]}, versions={},
                       nodeids={"test_gen[p]": "b/test_x.py::test_gen[p]", "other": "b/test_x.py::other"})
    assert str(info.value) == (
        f"baseline file {path}: the entries of test_gen[p] belong to a/test_x.py::test_gen[p], not to "
        f"b/test_x.py::test_gen[p]: the file keys a test by its name and parameters, so these two tests "
        f"would share one entry, and neither is compared with the other's figures; rename one of the "
        f"test functions, or, if the test moved there, delete the entries of test_gen[p] and save them "
        f"again with --specdec-save-baseline")
    assert path.read_bytes() == before


def test_version_2_entries_record_no_node_id_and_match_any_test_of_their_key(tmp_path):
    """A file saved before entries kept their node id is read as before, and a save into it adds
    the node id to the figures it writes (the others keep none)."""
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 2, "hardware_key": "cpu", "entries": {
        "test_gen[p]": {"output_tok_s": {"value": 10.0, "direction": "higher"},
                        "accept_length": {"value": 3.0, "direction": "higher", "deterministic": True}}}}))
    assert load_baselines(path, "cpu").get("test_gen[p]", "output_tok_s").nodeid is None
    save_baselines(path, "cpu", {"test_gen[p]": [mv(value=11.0)]}, versions={},
                   nodeids={"test_gen[p]": "b/test_x.py::test_gen[p]"})
    doc = json.loads(path.read_text())
    assert doc["version"] == VERSION
    assert doc["entries"]["test_gen[p]"]["output_tok_s"]["nodeid"] == "b/test_x.py::test_gen[p]"
    assert "nodeid" not in doc["entries"]["test_gen[p]"]["accept_length"]


def test_a_save_that_knows_no_node_id_keeps_the_one_there(tmp_path):
    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"t": [mv(value=1.0)]}, versions={}, nodeids={"t": "a/test_x.py::t"})
    save_baselines(path, "cpu", {"t": [mv(value=2.0)]}, versions={})
    assert load_baselines(path, "cpu").get("t", "output_tok_s").nodeid == "a/test_x.py::t"


@pytest.mark.parametrize("nodeid", [3, "", ["a/test_x.py::t"]])
def test_a_node_id_that_is_not_one_is_a_usage_error(tmp_path, nodeid):
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 3, "hardware_key": "cpu", "entries": {
        "t": {"output_tok_s": {"value": 10.0, "direction": "higher", "nodeid": nodeid}}}}))
    with pytest.raises(SpecdecUsageError, match=r"t output_tok_s: 'nodeid' must be the saving test's node id"):
        load_baselines(path, "cpu")


def test_a_file_of_a_newer_version_names_the_fix(tmp_path):
    """What a release that reads only older versions says of a file this one saved."""
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION + 1, "hardware_key": "cpu", "entries": {}}))
    with pytest.raises(SpecdecUsageError, match=f"has format version {VERSION + 1}, newer than this "
                                                f"pytest-specdec reads \\({VERSION}\\); upgrade pytest-specdec"):
        load_baselines(path, "cpu")


# ------------------------------------------------------------------ a lock another run holds


def test_a_save_waits_for_a_held_lock_only_so_long_saying_who_holds_it(tmp_path):
    """A save waited on the lock without a bound and in silence, so a run that hung holding it
    hung every later save too."""
    from pytest_specdec.baselines import LockTimeout

    path = tmp_path / "cpu.json"
    save_baselines(path, "cpu", {"a": [mv(value=1.0)]}, versions={})
    before = path.read_bytes()
    lines: list[str] = []
    with held_by_another_process(tmp_path / ".cpu.json.lock") as holder:
        with pytest.raises(LockTimeout) as info:
            save_baselines(path, "cpu", {"a": [mv(value=2.0)]}, versions={},
                           lock={"timeout": 0.5, "setting": "--specdec-baseline-lock-timeout",
                                 "announce": lines.append})
    lock_file = tmp_path / ".cpu.json.lock"
    who = f"pid {holder.pid} (" if os.path.exists("/proc/locks") else "another process"
    assert len(lines) == 1
    assert lines[0].startswith(f"baseline save: {lock_file} is held by {who}")
    assert lines[0].endswith("; waiting up to 0.25s more before the save fails "
                             "(bound: --specdec-baseline-lock-timeout)")
    message = str(info.value)
    assert message.startswith(f"{lock_file} stayed held by {who}")
    assert (f"for 0.5s (--specdec-baseline-lock-timeout), so nothing was written into {path}; "
            f"a save holds it well under a second: if no other save is under way, that process hung, "
            f"so end it (the lock goes with it) and save again, or raise "
            f"--specdec-baseline-lock-timeout if it is just slow") in message
    assert path.read_bytes() == before
    # its holder gone, the lock is free at once
    save_baselines(path, "cpu", {"a": [mv(value=2.0)]}, versions={}, lock={"timeout": 0.5})
    assert load_baselines(path, "cpu").get("a", "output_tok_s").value == 2.0


def test_the_durations_file_s_lock_is_bounded_too(tmp_path):
    from pytest_specdec import durations
    from pytest_specdec.baselines import LockTimeout

    path = tmp_path / "durations.json"
    with held_by_another_process(tmp_path / ".durations.json.lock"):
        with pytest.raises(LockTimeout, match="stayed held by"):
            durations.save(path, {"ar-tp1": 1.0}, lock={"timeout": 0.4})
    assert not path.exists()


def test_a_killed_saves_temporary_durations_file_is_removed_under_its_lock(tmp_path):
    """As a baseline file's (`remove_leftovers`): every save of durations.json holds its lock."""
    from pytest_specdec import durations

    torn = tmp_path / ".durations.json.k1ll3d.tmp"
    torn.write_text("{")
    durations.save(tmp_path / "durations.json", {"ar-tp1": 1.0})
    assert not torn.exists()
