"""The verify benchmark's bookkeeping, on the CPU: byte and FLOP counts, the grid, the goal
verdicts (met, missed, or out of reach where a floor exceeds the goal's time), the L2 flush
switch and the table. (The timings themselves need a GPU:
tests/bench/test_verify_kernel.py.)"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from specdec_kernels import bench  # noqa: E402


def test_bytes_and_flops_count_kv_once_plus_q_and_output():
    shape = bench.Shape(batch=8, num_nodes=17, q_heads=32, kv_heads=8, head_dim=128, prefix=8192)
    kv = 2 * 8 * (8192 + 17) * 8 * 128 * 2
    q_and_out = 2 * 8 * 17 * 32 * 128 * 2
    assert shape.bytes_moved() == kv + q_and_out
    assert shape.flops() == 4 * 8 * 17 * 32 * (8192 + 17) * 128
    assert shape.name == "B8-T17-H32/8/128-L8192"


def test_grid_holds_head_dim_128_and_the_qwen_27b_heads_at_256():
    at_128, at_256 = bench.grid_shapes((128,)), bench.grid_shapes((256,))
    assert len(at_128) == 90 and len(at_256) == 108 and bench.grid_shapes() == at_128 + at_256
    assert {(s.q_heads, s.kv_heads) for s in at_256} == {(24, 4), (6, 1), (3, 1)}
    assert {s.num_nodes for s in at_256} == {9, 17, 33, 65} and {s.head_dim for s in at_256} == {256}
    goal = [s.name for s in at_128 if s.memory_bound_goal()]
    assert len(goal) == 12 and all("-H32/" in n and ("-T9-" in n or "-T16-" in n) for n in goal)
    assert "B1-T9-H32/8/128-L8192" not in goal  # 8k tokens in all: below the 32k class
    # at 256: T*G <= 64 is T = 9 at G = 6 and T = 9 or 17 at G = 3
    assert {(s.num_nodes, s.group) for s in at_256 if s.memory_bound_goal()} == {(9, 6), (9, 3), (17, 3)}
    assert all(s in bench.grid_shapes() for s in bench.quick_shapes())
    # a GPU run's order: head dim 256 first
    full = bench.run_shapes(full=True)
    assert sorted(s.name for s in full) == sorted(s.name for s in bench.grid_shapes())
    assert [s.head_dim for s in full] == [256] * 108 + [128] * 90 and bench.run_shapes(False) == bench.quick_shapes()


def _row(**fields):
    """A memory-bound row that meets every goal: 80 us against SDPA's 1000 (10x allows 100 us),
    a roofline of 25 us (SDPA 40x it), floors of 3 us (launch) and 20 us (read once), 12 us of host
    time against a host floor of 8."""
    row = dict(ok=True, memory_bound_goal=False, bound="memory", us=80.0, mem_us=25.0, mm_us=5.0, roof_us=25.0,
               sdpa_us=1000.0, x_sdpa_max=40.0, eager_us=85.0, host_us=12.0, launch_us=3.0, stream_us=20.0,
               host_floor_us=8.0)
    row.update(fields)
    return row


def test_goal_verdicts_apply_each_goal_where_it_applies():
    assert bench.goal_verdicts(_row()) == {"correct": "met", "sdpa": "met", "eager": "met", "host": "met"}
    assert bench.goal_verdicts(_row(ok=False))["correct"] == "missed"
    assert set(bench.goal_verdicts(_row(memory_bound_goal=True, bound="compute"))) == {
        "correct", "memory", "compute", "sdpa", "eager", "host"}
    assert "sdpa" not in bench.goal_verdicts({k: v for k, v in _row().items() if k != "sdpa_us"})
    # eager within 1.15x of the graph only from 50 us of graph time on; flex where it compiled
    assert bench.goal_verdicts(_row(us=80.0, eager_us=93.0))["eager"] == "missed"
    assert "eager" not in bench.goal_verdicts(_row(us=20.0, eager_us=60.0, mem_us=5.0, roof_us=5.0))
    # with the graph timed back to back beside the eager calls, the goal is their ratio
    assert bench.goal_verdicts(_row(us=80.0, eager_us=93.0, eager_x_graph=1.10))["eager"] == "met"
    assert bench.goal_verdicts(_row(us=80.0, eager_us=85.0, eager_x_graph=1.16))["eager"] == "missed"
    assert bench.goal_verdicts(_row(x_flex=0.9))["flex"] == "missed"
    assert bench.goal_verdicts(_row(x_flex=1.1))["flex"] == "met"


# (row fields, goal, verdict): met at the allowed time, missed above it while the floor fits,
# unreachable only where the floor itself exceeds it (a floor equal to the allowed time is reachable)
@pytest.mark.parametrize("fields,goal,expected", [
    # memory: the bytes at 75 % of the copy bandwidth, 30 / 0.75 = 40 us; floor the read-once kernel
    (dict(memory_bound_goal=True, mem_us=30.0, us=40.0), "memory", "met"),
    (dict(memory_bound_goal=True, mem_us=30.0, us=41.0, stream_us=40.0), "memory", "missed"),
    (dict(memory_bound_goal=True, mem_us=30.0, us=41.0, stream_us=40.5), "memory", "unreachable"),
    (dict(memory_bound_goal=True, mem_us=30.0, us=41.0, stream_us=30.0, launch_us=45.0), "memory", "missed"),
    (dict(memory_bound_goal=True, mem_us=30.0, us=39.0, stream_us=45.0), "memory", "met"),
    (dict(memory_bound_goal=True, mem_us=30.0, us=41.0, stream_us=None), "memory", "missed"),
    # compute: the FLOPs at 50 % of the matmul rate, 20 / 0.5 = 40 us; floor the larger kernel floor
    (dict(bound="compute", mm_us=20.0, us=40.0), "compute", "met"),
    (dict(bound="compute", mm_us=20.0, us=41.0, launch_us=3.0, stream_us=40.0), "compute", "missed"),
    (dict(bound="compute", mm_us=20.0, us=41.0, launch_us=3.0, stream_us=40.5), "compute", "unreachable"),
    (dict(bound="compute", mm_us=20.0, us=41.0, launch_us=40.5, stream_us=3.0), "compute", "unreachable"),
    # sdpa, SDPA at least 10x the roofline: a tenth of SDPA's 1000 us
    (dict(us=100.0), "sdpa", "met"),
    (dict(us=101.0, stream_us=100.0), "sdpa", "missed"),
    (dict(us=101.0, stream_us=100.5), "sdpa", "unreachable"),
    (dict(us=101.0, launch_us=100.5), "sdpa", "unreachable"),
    # at exactly 10x the 10x variant applies: a tenth of 250 us, not 25 / 0.7 = 35.7 us
    (dict(us=101.0, sdpa_us=250.0, x_sdpa_max=10.0, stream_us=30.0), "sdpa", "unreachable"),
    (dict(us=101.0, sdpa_us=250.0, x_sdpa_max=9.99, stream_us=30.0), "sdpa", "missed"),
    # sdpa, SDPA within 10x of the roofline: the roofline at 70 %, 25 / 0.7 = 35.7 us
    (dict(us=35.0, sdpa_us=200.0, x_sdpa_max=8.0), "sdpa", "met"),
    (dict(us=36.0, sdpa_us=200.0, x_sdpa_max=8.0, stream_us=35.0), "sdpa", "missed"),
    (dict(us=36.0, sdpa_us=200.0, x_sdpa_max=8.0, stream_us=36.0), "sdpa", "unreachable"),
    # sglang: a tenth of SGLang's time, where its output was right (no verdict where it was wrong)
    (dict(us=50.0, sglang_us=500.0, x_sglang=10.0, sglang_ok=True), "sglang", "met"),
    (dict(us=51.0, sglang_us=500.0, x_sglang=9.8, sglang_ok=True, stream_us=49.0), "sglang", "missed"),
    (dict(us=51.0, sglang_us=500.0, x_sglang=9.8, sglang_ok=True, stream_us=50.5), "sglang", "unreachable"),
    (dict(us=51.0, sglang_us=500.0, x_sglang=9.8, sglang_ok=False), "sglang", None),
    # the prefix's FLOPs at the matmul rate are a floor too: 60 us of FLOPs, 56 of them the prefix's
    (dict(us=55.0, sglang_us=500.0, sglang_ok=True, mm_us=60.0, prefix=1024 - 64, num_nodes=64), "sglang",
     "unreachable"),
    (dict(us=55.0, sglang_us=600.0, sglang_ok=True, mm_us=60.0, prefix=1024 - 64, num_nodes=64), "sglang",
     "met"),
    (dict(us=61.0, sglang_us=600.0, sglang_ok=True, mm_us=60.0, prefix=1024 - 64, num_nodes=64), "sglang",
     "missed"),
    # host: 25 us a call; floor the run's host floor (None where it could not be measured)
    (dict(host_us=25.0, host_floor_us=30.0), "host", "met"),
    (dict(host_us=26.0, host_floor_us=25.0), "host", "missed"),
    (dict(host_us=26.0, host_floor_us=25.5), "host", "unreachable"),
    (dict(host_us=40.0, host_floor_us=None), "host", "missed"),
])
def test_a_goal_is_unreachable_only_where_its_floor_exceeds_the_allowed_time(fields, goal, expected):
    row = _row(**{k: v for k, v in fields.items() if v is not None})
    for key in [k for k, v in fields.items() if v is None]:
        row.pop(key)
    assert bench.goal_verdicts(row).get(goal) == expected


def test_goals_hold_at_their_boundaries_as_the_performance_page_states_them():
    """docs/kernels-performance.md, "Goals, and where they stand": each goal at, just inside and just
    outside its boundary (an equal value is within the goal)."""
    shape = bench.Shape
    # the memory-bound class: T*G <= 64 and B*L >= 32k (32768) tokens, both sides of each bound
    assert shape(32, 16, 32, 8, 128, 1024).memory_bound_goal()  # T*G 64, B*L 32768
    assert not shape(32, 13, 40, 8, 128, 1024).memory_bound_goal()  # T*G 65
    assert not shape(1, 16, 32, 8, 128, 32767).memory_bound_goal()  # B*L 32767
    # eager within 1.15x of the graph where that is >= 50 us
    assert bench.goal_verdicts(_row(us=50.0, eager_x_graph=1.15))["eager"] == "met"
    assert bench.goal_verdicts(_row(us=50.0, eager_x_graph=1.1501))["eager"] == "missed"
    assert "eager" not in bench.goal_verdicts(_row(us=49.99, eager_x_graph=2.0, mem_us=5.0, roof_us=5.0))
    # faster than FlexAttention: as fast is not faster
    assert bench.goal_verdicts(_row(x_flex=1.0))["flex"] == "missed"
    # compute at exactly 50 % of the matmul rate, the roofline at exactly 70 %: met
    assert bench.goal_verdicts(_row(bound="compute", mm_us=40.0, us=80.0))["compute"] == "met"
    roof = _row(us=25.0 / bench.ROOF_GOAL, sdpa_us=200.0, x_sdpa_max=8.0)
    assert bench.goal_verdicts(roof)["sdpa"] == "met"
    assert bench.goal_verdicts(dict(roof, us=roof["us"] * 1.0001, stream_us=roof["us"]))["sdpa"] == "missed"
    # the memory goal's floor is the read-once kernel alone; the others' the largest floor
    assert bench.goal_verdicts(_row(memory_bound_goal=True, mem_us=30.0, us=41.0, launch_us=41.0,
                                    stream_us=39.0))["memory"] == "missed"
    # the summary counts each verdict of each goal, every verdict named
    rows = [dict(goals=bench.goal_verdicts(_row(**fields))) for fields in (
        {}, dict(us=101.0, stream_us=100.5), dict(us=101.0, stream_us=99.0), dict(host_us=26.0))]
    assert bench.goal_summary(rows) == {
        "correct": {"met": 4, "missed": 0, "unreachable": 0}, "sdpa": {"met": 2, "missed": 1, "unreachable": 1},
        "eager": {"met": 4, "missed": 0, "unreachable": 0}, "host": {"met": 3, "missed": 1, "unreachable": 0}}


def test_goal_bounds_name_the_measured_the_allowed_and_the_floor():
    bounds = bench.goal_bounds(_row(memory_bound_goal=True, bound="compute", mm_us=30.0, launch_us=25.0))
    assert bounds["memory"] == (80.0, pytest.approx(25.0 / 0.75), 20.0)
    assert bounds["compute"] == (80.0, pytest.approx(60.0), 25.0)
    assert bounds["sdpa"] == (80.0, pytest.approx(100.0), 25.0)
    assert bounds["host"] == (12.0, 25.0, 8.0)
    assert bench.goal_bounds({k: v for k, v in _row().items() if k not in ("launch_us", "stream_us")})["sdpa"][2] is None
    # with the shape's fields, the FLOPs every node spends on the prefix keys: 30 us at 1008 of 1024 keys
    shaped = _row(bound="compute", mm_us=30.0, launch_us=2.0, stream_us=20.0, prefix=1008, num_nodes=16)
    assert bench.matmul_floor_us(shaped) == pytest.approx(30.0 * 1008 / 1024)
    assert bench.goal_bounds(shaped)["compute"][2] == bench.goal_bounds(shaped)["sdpa"][2] == pytest.approx(29.53125)
    assert bench.matmul_floor_us(_row()) is None


def test_l2_flush_rejects_unknown_modes():
    with pytest.raises(ValueError, match="--l2-flush must be one of"):
        with bench.l2_flush("dirty"):
            pass
    with bench.l2_flush("zero"):  # leaves do_bench alone; needs no GPU
        pass


def test_table_renders_missing_baselines_as_dashes_and_marks_unreachable_goals():
    row = {"shape": "B1-T9-H32/8/128-L1024", "m_tiles": 1, "block_m": 64, "tail_m": 0, "block_n": 32,
           "splits": 4, "bound": "memory", "us": 15.4, "roof_us": 1.2, "tb_s": 0.27, "tflop_s": 8.0,
           "roof_frac": 0.07, "bw_frac": 0.07, "mm_frac": 0.01, "err": 2.7e-3, "ok": True,
           "goals": {"correct": "met", "sdpa": "missed", "host": "met"}}
    table = bench.format_table([row])
    header, rule, line = table.splitlines()
    assert header.count("|") == rule.count("|") == line.count("|")
    assert "| host us | host floor us | launch us | floor us | roof us |" in header
    assert "| 1x64/32/4 | memory | 15.4 | - | - | - | - | - | - | 1.2 |" in line and line.endswith("| sdpa |")
    floored = dict(row, launch_us=2.46, stream_us=9.04, goals={"correct": "met", "sdpa": "unreachable",
                                                                "host": "missed"})
    line = bench.format_table([floored]).splitlines()[2]
    assert "| 15.4 | - | - | - | - | 2.5 | 9.0 | 1.2 |" in line and line.endswith("| sdpa*, host |")
    timed = bench.format_table([dict(row, eager_us=17.0, eager_x_graph=1.0625, host_us=12.0,
                                     host_floor_us=6.74)]).splitlines()[2]
    assert "| 15.4 | 17.0 | 1.06 | 12.0 | 6.7 | - |" in timed
    sglang = bench.format_table([dict(row, x_sglang=31.25, sglang_ok=True)]).splitlines()[2]
    assert "| - | - | 31.2 | 2.7e-03 |" in sglang
    assert "| 31.2 (wrong) |" in bench.format_table([dict(row, x_sglang=31.25, sglang_ok=False)])
    assert "| - | error | 2.7e-03 |" in bench.format_table([dict(row, sglang_error="ImportError: x")])
    pingpong = bench.format_table([dict(row, kernel="pingpong", persistent=True, goals={})]).splitlines()[2]
    assert "| 1x64/32/4 PP P | memory |" in pingpong and pingpong.endswith("| none |")
    assert bench.goal_summary([row, floored, dict(row, goals={"sdpa": "met"})]) == {
        "correct": {"met": 2, "missed": 0, "unreachable": 0}, "sdpa": {"met": 1, "missed": 1, "unreachable": 1},
        "host": {"met": 1, "missed": 1, "unreachable": 0}}


def test_tiles_name_split_query_heads_and_tails():
    row = {"m_tiles": 1, "block_m": 64, "tail_m": 8}
    assert bench.tiles_label(row) == "1x64+8"
    assert bench.tiles_label(dict(row, head_split=2)) == "2x(1x64+8)"
    assert bench.tiles_label(dict(row, tail_m=0, m_tiles=3, head_split=1)) == "3x64"


def test_unknown_sglang_shape_names_are_refused_before_any_gpu_work(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--sglang", "B8-T9-H32/8/128-L8192,B8-T9"])
    assert exit_info.value.code == 2
    assert "--sglang names unknown shape(s) B8-T9:" in capsys.readouterr().err


def test_unknown_shape_names_and_head_dims_are_refused_before_any_gpu_work(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--shapes", "B8-T9-H32/8/128-L8192,B8-T9-L8k"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown shape name(s) B8-T9-L8k" in err and "--list-shapes" in err
    assert bench.main(["--list-shapes"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) == 198 and "B8-T9-H32/8/128-L8192" in names and "B8-T17-H24/4/256-L8192" in names
    assert bench.main(["--list-shapes", "--head-dims", "256"]) == 0
    assert len(capsys.readouterr().out.split()) == 108
    with pytest.raises(SystemExit):
        bench.main(["--head-dims", "96"])
    assert "--head-dims takes a comma-separated subset of 128, 256" in capsys.readouterr().err


def _saved_row(name: str, **fields) -> dict:
    row = _row(shape=name, m_tiles=1, block_m=64, tail_m=0, block_n=32, splits=4, roof_frac=0.3, bw_frac=0.3,
               mm_frac=0.1, err=2.5e-3)
    row["goals"] = bench.goal_verdicts(row)
    row.update(fields)
    return {k: v for k, v in row.items() if v is not None}


def test_a_saved_run_renders_its_table_without_a_gpu(tmp_path, capsys):
    """A run cut short keeps its rows (verify.jsonl): --table-from renders what they hold."""
    rows = tmp_path / "verify.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in (
        _saved_row("B1-T9-H32/8/128-L1024"), _saved_row("B8-T9-H32/8/128-L1024", host_us=30.0,
                                                        goals={"correct": "met", "host": "missed"}))) + "\n\n")
    table = tmp_path / "verify.md"
    assert bench.main(["--table-from", str(rows), "--markdown", str(table)]) == 0
    text = table.read_text()
    assert text.startswith(f"table of 2 rows from {rows}\n")
    assert "| B1-T9-H32/8/128-L1024 | 1x64/32/4 | memory | 80.0 |" in text
    assert text.count("| host |") == 1 and '"host": {"met": 1, "missed": 1, "unreachable": 0}' in text
    assert "B8-T9-H32/8/128-L1024" in capsys.readouterr().out
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps(_saved_row("B1-T9-H32/8/128-L1024", ok=False)) + "\n")
    assert bench.main(["--table-from", str(wrong)]) == 1


@pytest.mark.parametrize("content, message", [
    ("", "no rows"),
    ('{"shape": "B1-T9-H32/8/128-L1024"}\n', ":1: not a bench row (no bound, m_tiles, block_m,"),
    ('{"shape": "B1", "bound": "memory", "m_tiles": 1, "block_m": 64, "block_n": 32, "splits": 1, "us": "fast", '
     '"roof_us": 1, "roof_frac": 1, "bw_frac": 1, "mm_frac": 1, "err": 0, "goals": []}\n',
     ":1: not a bench row (no us, goals, or not of its type)"),
    ("[1, 2]\n", ":1: not a bench row (no shape, bound,"),
    # a row without its verdicts would read as missing no goal and go uncounted; pre-verdict
    # booleans and unknown verdicts are refused too, in one line
    *((json.dumps(_saved_row("B1-T9-H32/8/128-L1024", goals=goals)) + "\n",
       ":1: not a bench row (no goals, or not of its type) (goals: each met, missed or unreachable, correct among")
      for goals in (None, {}, {"correct": "met", "sdpa": "xfail"}, {"correct": True, "host": False},
                    {"host": "met"})),
    ("{truncated\n", ":1: not JSON"),
])
def test_a_saved_run_that_is_not_bench_rows_is_refused_by_line(tmp_path, capsys, content, message):
    rows = tmp_path / "verify.jsonl"
    rows.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--table-from", str(rows), "--markdown", str(tmp_path / "verify.md")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "verify.jsonl" in err
    assert not (tmp_path / "verify.md").exists()
    with pytest.raises(SystemExit):
        bench.main(["--table-from", str(tmp_path / "missing.jsonl")])
    assert "cannot read" in capsys.readouterr().err


def test_a_saved_run_whose_table_cannot_be_written_says_where(tmp_path, capsys):
    rows = tmp_path / "verify.jsonl"
    rows.write_text(json.dumps(_saved_row("B1-T9-H32/8/128-L1024")) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--table-from", str(rows), "--markdown", str(tmp_path / "no-such-dir" / "verify.md")])
    assert exit_info.value.code == 2 and "cannot write" in capsys.readouterr().err


def test_time_eagerly_alternates_eager_and_graph_windows_and_takes_medians(monkeypatch):
    """Eager and graph windows alternate, so a clock that moves between them moves both; each
    window issues whole cycles of the input sets; the warm-up window is left out of the medians."""
    windows = []
    eager_us = iter([99.0, 10.0, 12.0, 11.0, 30.0, 13.0])  # warm-up, then 5 rounds
    graph_us = iter([9.0, 10.0, 10.0, 11.0, 20.0])

    def window(issue, calls):
        windows.append((issue.__name__, calls))
        return next(eager_us if issue.__name__ == "eager" else graph_us, 5.0)

    monkeypatch.setattr(bench, "_window_us", window)
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda: None)
    calls = []
    timing = bench.time_eagerly(lambda *a: calls.append(a), [(1,), (2,), (3,)], graph_us=500.0, graph=object())
    assert [name for name, _ in windows] == ["eager"] + ["eager", "replayed"] * bench.EAGER_ROUNDS
    assert {n for _, n in windows} == {21}  # ~10 ms of 500 us calls is 20, rounded to whole cycles of 3
    assert (timing.gpu_us, timing.graph_us) == (12.0, 10.0) and timing.eager_x_graph == pytest.approx(1.2)
    assert timing.host_us >= 0 and len(calls) == bench.HOST_BATCHES * (bench.HOST_LEAD_CALLS + bench.HOST_BATCH_CALLS)
    no_graph = bench.time_eagerly(lambda *a: None, [()], graph_us=500.0)
    assert no_graph.graph_us is None and no_graph.eager_x_graph is None


def test_host_time_and_its_floor_are_each_the_least_of_measurements_taken_in_turn(monkeypatch):
    """A slow moment of the host only adds time: the call's and the floor's host times are each the
    least of HOST_REPEATS measurements, taken alternately so that both see the same moments."""
    order, samples = [], {"call": iter([30.0, 17.0]), "floor": iter([12.0, 8.0, 9.0])}

    def measured(call, input_sets):
        order.append(call.__name__)
        return next(samples[call.__name__])

    def call(*_):
        pass

    def floor(*_):
        pass

    monkeypatch.setattr(bench, "host_us_per_call", measured)
    assert bench.least_host_times(call, [()], 32.5, floor, repeats=3) == (17.0, 8.0)
    assert order == ["floor", "floor", "call", "floor", "call"]
    order.clear()
    samples["call"] = iter([40.0, 41.0])
    assert bench.least_host_times(call, [()], 32.5, None, repeats=3) == (32.5, None)
    assert order == ["call", "call"]
