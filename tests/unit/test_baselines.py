"""baselines: hardware keys, file schema, atomic merging saves, tolerances and the gate."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import tempfile

import pytest

from pytest_specdec.baselines import (
    FORMAT,
    VERSION,
    BaselineEntry,
    Baselines,
    Tolerance,
    baseline_path,
    collect_versions,
    compare_all,
    compare_metric,
    git_commit,
    load_baselines,
    parse_tolerances,
    regression_message,
    save_baselines,
)
from pytest_specdec.errors import SpecdecUsageError
from pytest_specdec.metrics import METRIC_DIRECTIONS, MetricValue

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


def test_save_then_load_round_trip(tmp_path):
    path = tmp_path / "baselines" / "cpu.json"
    saved = save_baselines(path, "cpu", {TID: [mv(spread=2.5), mv("ttft_ms", 12.0, "lower")]},
                           versions={"pytest-specdec": "0.1.0", "torch": "2.13.0"}, commit="abc123",
                           date="2026-11-30T00:00:00+00:00")
    assert len(saved) == 2
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT and doc["version"] == VERSION and doc["hardware_key"] == "cpu"
    stored = doc["entries"][TID]["output_tok_s"]
    assert stored == {"value": 100.0, "direction": "higher", "spread": 2.5, "samples": 16, "deterministic": False,
                      "date": "2026-11-30T00:00:00+00:00", "versions": {"pytest-specdec": "0.1.0", "torch": "2.13.0"},
                      "commit": "abc123"}
    loaded = load_baselines(path, "cpu")
    assert loaded.get(TID, "ttft_ms").value == 12.0
    assert loaded.get(TID, "ttft_ms").direction == "lower"
    assert loaded.get(TID, "nope") is None and loaded.get("other", "ttft_ms") is None
    assert loaded.to_json() == doc


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


def test_save_refuses_to_overwrite_a_foreign_file(tmp_path):
    path = tmp_path / "cpu.json"
    save_baselines(path, "nvidia-h200-sm_90-x8", {"a": [mv()]}, versions={})
    before = path.read_text()
    with pytest.raises(SpecdecUsageError, match="belongs to hardware"):
        save_baselines(path, "cpu", {"a": [mv()]}, versions={})
    assert path.read_text() == before


# ------------------------------------------------------------------ tolerances


def test_parse_tolerances_relative_absolute_and_wildcard():
    t = parse_tolerances(" output_tok_s:5% , accept_length:0.05,ttft_ms:10%,*:20%")
    assert t["output_tok_s"] == Tolerance("output_tok_s", pytest.approx(0.05), True)
    assert t["accept_length"] == Tolerance("accept_length", 0.05, False)
    assert t["ttft_ms"].allowed(200.0) == pytest.approx(20.0)
    assert t["accept_length"].allowed(3.0) == 0.05
    assert str(t["output_tok_s"]) == "5%" and str(t["accept_length"]) == "0.05"
    assert set(t) == {"output_tok_s", "accept_length", "ttft_ms", "*"}


@pytest.mark.parametrize(
    "expr, match",
    [
        ("", "empty tolerance expression"),
        ("output_tok_s", "is not METRIC:TOLERANCE"),
        ("output_tok_s:", "is not METRIC:TOLERANCE"),
        (":5%", "is not METRIC:TOLERANCE"),
        ("output_tok_s:5%,", "stray comma"),
        ("output_tok_s:five%", "is not a number or percentage"),
        ("output_tok_s:-5%", "must be a finite number >= 0"),
        ("output_tok_s:nan", "must be a finite number >= 0"),
        ("output_tok_s:5%,output_tok_s:3%", "given twice"),
        ("tok/s:5%", "is not a metric name"),
        ("output_toks:5%", "unknown metric 'output_toks'; known metrics: accept_length"),
    ],
)
def test_bad_tolerance_expressions(expr, match):
    with pytest.raises(SpecdecUsageError, match=match) as info:
        parse_tolerances(expr, known_metrics=METRIC_DIRECTIONS)
    assert str(info.value).startswith("--specdec-compare-fail:")


def test_unknown_metrics_allowed_without_known_list_and_source_named():
    assert "custom_metric" in parse_tolerances("custom_metric:1%")
    with pytest.raises(SpecdecUsageError, match=r"^\[tool.specdec\] compare_fail:"):
        parse_tolerances("x", source="[tool.specdec] compare_fail")


# ------------------------------------------------------------------ comparison

TOL = parse_tolerances("output_tok_s:5%,accept_length:2%,ttft_ms:10%")


def test_regression_line_matches_the_documented_format():
    c = compare_metric(TID, mv(value=812.4), entry(901.0), TOL["output_tok_s"])
    assert c.verdict == "regression" and c.failed
    assert c.line() == "output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)"
    assert c.change == pytest.approx(812.4 / 901.0 - 1)


def test_lower_is_better_regression_and_improvements():
    slow = compare_metric(TID, mv("ttft_ms", 120.0, "lower"), entry(100.0, "lower"), TOL["ttft_ms"])
    assert slow.failed and slow.line() == "ttft_ms 120.0 > baseline 100.0 +10% (+20.0%)"
    fast = compare_metric(TID, mv("ttft_ms", 80.0, "lower"), entry(100.0, "lower"), TOL["ttft_ms"])
    assert fast.verdict == "improvement" and not fast.failed
    assert fast.line() == "ttft_ms 80.00 < baseline 100.0 -10% (-20.0%)"
    up = compare_metric(TID, mv(value=990.0), entry(901.0), TOL["output_tok_s"])
    assert up.verdict == "improvement" and up.line() == "output_tok_s 990.0 > baseline 901.0 +5% (+9.9%)"


def test_within_tolerance_is_unchanged():
    c = compare_metric(TID, mv(value=870.0), entry(901.0), TOL["output_tok_s"])  # -3.4%
    assert c.verdict == "unchanged" and not c.failed
    assert c.line() == "output_tok_s 870.0 < baseline 901.0 ±5% (-3.4%)"
    same = compare_metric(TID, mv(value=901.0), entry(901.0), TOL["output_tok_s"])
    assert same.line() == "output_tok_s 901.0 == baseline 901.0 ±5% (+0.0%)"


def test_noise_aware_rule_needs_both_tolerance_and_spread_exceeded():
    # -9.8% is beyond 5%, but both runs are noisy: 2 * hypot(40, 30) = 100 > 88.6 drop
    noisy = compare_metric(TID, mv(value=812.4, spread=40.0), entry(901.0, spread=30.0), TOL["output_tok_s"])
    assert noisy.verdict == "noise" and not noisy.failed
    assert noisy.noise == pytest.approx(100.0)
    assert "within noise ±100.0" in noisy.line()
    # the same drop with quiet runs fails
    quiet = compare_metric(TID, mv(value=812.4, spread=4.0), entry(901.0, spread=3.0), TOL["output_tok_s"])
    assert quiet.failed
    # looser sigma setting turns it back into noise
    assert compare_metric(TID, mv(value=812.4, spread=4.0), entry(901.0, spread=3.0), TOL["output_tok_s"],
                          noise_sigmas=20).verdict == "noise"


def test_deterministic_metrics_ignore_spread():
    noisy_but_deterministic = compare_metric(
        TID, mv("accept_length", 3.10, spread=1.0, deterministic=True),
        entry(3.21, spread=1.0, deterministic=True), TOL["accept_length"])
    assert noisy_but_deterministic.failed and noisy_but_deterministic.noise == 0.0
    assert noisy_but_deterministic.line() == "accept_length 3.10 < baseline 3.21 -2% (-3.4%)"
    # if only one side claims determinism, the spread still counts
    mixed = compare_metric(TID, mv("accept_length", 3.10, spread=1.0, deterministic=True),
                           entry(3.21, spread=1.0), TOL["accept_length"])
    assert mixed.verdict == "noise"


def test_absolute_tolerance_and_ungated_metrics():
    c = compare_metric(TID, mv("accept_length", 3.10), entry(3.21), parse_tolerances("accept_length:0.2")["accept_length"])
    assert c.verdict == "unchanged"
    ungated = compare_metric(TID, mv("accept_rate", 0.40), entry(0.50), None)
    assert ungated.verdict == "regression" and not ungated.gated and not ungated.failed
    assert ungated.line() == "accept_rate 0.4 < baseline 0.5 (-20.0%, not gated)"


def test_new_metric_without_baseline():
    c = compare_metric(TID, mv(value=812.4), None, TOL["output_tok_s"])
    assert c.verdict == "new" and not c.failed and c.change is None
    assert c.line() == "output_tok_s 812.4 (no baseline)"


def test_zero_baseline_has_no_relative_change():
    c = compare_metric(TID, mv("errors", 1.0, "lower"), entry(0.0, "lower"), Tolerance("errors", 0.0, False))
    assert c.failed and c.change is None and "(n/a)" in c.line()


def test_direction_mismatch_is_a_usage_error():
    with pytest.raises(SpecdecUsageError, match="re-create the baseline"):
        compare_metric(TID, mv(value=1.0), entry(1.0, "lower"), None)


def test_compare_all_and_regression_message():
    b = Baselines("cpu", {TID: {"output_tok_s": entry(901.0), "accept_length": entry(3.21),
                                "ttft_ms": entry(100.0, "lower")}})
    comps = compare_all(TID, [mv(value=812.4), mv("accept_length", 3.30), mv("ttft_ms", 101.0, "lower"),
                              mv("tpot_ms", 5.0, "lower")], b, TOL)
    assert [c.verdict for c in comps] == ["regression", "improvement", "unchanged", "new"]
    assert regression_message(comps) == "output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)"
    assert regression_message(comps[1:]) is None
    wildcard = compare_all(TID, [mv("ttft_ms", 150.0, "lower")], b, parse_tolerances("*:10%"))
    assert wildcard[0].failed
