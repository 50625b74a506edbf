"""The verify benchmark's bookkeeping, on the CPU: byte and FLOP counts, the grid, the goal
verdicts, the L2 flush switch and the table. (The timings themselves need a GPU:
tests/bench/test_verify_kernel.py.)"""

from __future__ import annotations

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


def _row(**fields):
    row = dict(ok=True, memory_bound_goal=False, bound="memory", bw_frac=0.5, mm_frac=0.1, x_sdpa=12.0,
               x_sdpa_max=40.0, roof_frac=0.3, us=80.0, eager_us=85.0, host_us=12.0)
    row.update(fields)
    return row


def test_goal_verdicts_apply_each_goal_where_it_applies():
    assert bench.goal_verdicts(_row()) == {"correct": True, "sdpa": True, "eager": True, "host": True}
    assert bench.goal_verdicts(_row(memory_bound_goal=True, bw_frac=0.74))["memory"] is False
    assert bench.goal_verdicts(_row(bound="compute", mm_frac=0.5))["compute"] is True
    # where SDPA is within 10x of the roofline, 70 % of the roofline stands in for 10x SDPA
    assert bench.goal_verdicts(_row(x_sdpa=6.0, x_sdpa_max=8.0, roof_frac=0.71))["sdpa"] is True
    assert bench.goal_verdicts(_row(x_sdpa=6.0, x_sdpa_max=8.0, roof_frac=0.69))["sdpa"] is False
    assert bench.goal_verdicts(_row(x_sdpa=9.0, x_sdpa_max=12.0, roof_frac=0.9))["sdpa"] is False
    # eager within 1.15x of the graph only from 50 us of graph time on; host time everywhere
    assert bench.goal_verdicts(_row(us=80.0, eager_us=93.0))["eager"] is False
    assert "eager" not in bench.goal_verdicts(_row(us=20.0, eager_us=60.0))
    assert bench.goal_verdicts(_row(host_us=26.0))["host"] is False
    assert bench.goal_verdicts(_row(x_flex=0.9))["flex"] is False
    assert bench.goal_verdicts(_row(ok=False))["correct"] is False


def test_l2_flush_rejects_unknown_modes():
    with pytest.raises(ValueError, match="--l2-flush must be one of"):
        with bench.l2_flush("dirty"):
            pass
    with bench.l2_flush("zero"):  # leaves do_bench alone; needs no GPU
        pass


def test_table_renders_missing_baselines_as_dashes_and_names_missed_goals():
    row = {"shape": "B1-T9-H32/8/128-L1024", "m_tiles": 1, "block_m": 64, "tail_m": 0, "block_n": 32,
           "splits": 4, "bound": "memory", "us": 15.4, "roof_us": 1.2, "tb_s": 0.27, "tflop_s": 8.0,
           "roof_frac": 0.07, "bw_frac": 0.07, "mm_frac": 0.01, "err": 2.7e-3, "ok": True,
           "goals": {"correct": True, "sdpa": False, "host": True}}
    table = bench.format_table([row])
    header, rule, line = table.splitlines()
    assert header.count("|") == rule.count("|") == line.count("|")
    assert "| 1x64/32/4 | memory | 15.4 | - | - | 1.2 |" in line and line.endswith("| sdpa |")
    pingpong = bench.format_table([dict(row, kernel="pingpong", persistent=True, goals={})]).splitlines()[2]
    assert "| 1x64/32/4 PP P | memory |" in pingpong and pingpong.endswith("| none |")
    assert bench.goal_summary([row, dict(row, goals={"sdpa": True})]) == {"correct": (1, 1), "sdpa": (1, 2),
                                                                          "host": (1, 1)}


def test_tiles_name_split_query_heads_and_tails():
    row = {"m_tiles": 1, "block_m": 64, "tail_m": 8}
    assert bench.tiles_label(row) == "1x64+8"
    assert bench.tiles_label(dict(row, head_split=2)) == "2x(1x64+8)"
    assert bench.tiles_label(dict(row, tail_m=0, m_tiles=3, head_split=1)) == "3x64"


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
