"""The verify benchmark's bookkeeping, on the CPU: byte and FLOP counts, the goal classes, the L2
flush switch and the table. (The timings themselves need a GPU: tests/bench/test_verify_kernel.py.)"""

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


def test_memory_bound_goal_class_is_the_issues_twelve_shapes():
    goal = [s.name for s in bench.issue_shapes() if s.memory_bound_goal()]
    assert len(bench.issue_shapes()) == 90
    assert len(goal) == 12
    assert all("-H32/" in name and ("-T9-" in name or "-T16-" in name) for name in goal)
    assert "B1-T9-H32/8/128-L8192" not in goal  # 8k tokens in all: below the 32k class


def test_l2_flush_rejects_unknown_modes():
    with pytest.raises(ValueError, match="--l2-flush must be one of"):
        with bench.l2_flush("dirty"):
            pass
    with bench.l2_flush("zero"):  # leaves do_bench alone; needs no GPU
        pass


def test_table_renders_missing_baselines_as_dashes():
    row = {"shape": "B1-T9-H32/8/128-L1024", "m_tiles": 1, "block_m": 64, "tail_m": 0, "block_n": 32,
           "splits": 4, "bound": "memory", "us": 15.4, "tb_s": 0.27, "tflop_s": 8.0, "roof_frac": 0.07,
           "bw_frac": 0.07, "mm_frac": 0.01, "err": 2.7e-3, "ok": True}
    table = bench.format_table([row], {"copy_tb_s": 4.2, "matmul_tflop_s": 700.0})
    header, rule, line = table.splitlines()
    assert header.count("|") == rule.count("|") == line.count("|")
    assert "| 1x64/32/4 | memory | 15.4 |" in line and "| - | - |" in line and line.endswith("| yes |")
    persistent = bench.format_table([dict(row, kernel="gluon", persistent=True)], {}).splitlines()[2]
    assert "| 1x64/32/4 G P | memory |" in persistent


def test_tiles_name_split_query_heads_and_tails():
    row = {"m_tiles": 1, "block_m": 64, "tail_m": 8}
    assert bench.tiles_label(row) == "1x64+8"
    assert bench.tiles_label(dict(row, head_split=2)) == "2x(1x64+8)"
    assert bench.tiles_label(dict(row, tail_m=0, m_tiles=3, head_split=1)) == "3x64"


def test_unknown_shape_names_are_refused_before_any_gpu_work(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--shapes", "B8-T9-H32/8/128-L8192,B8-T9-L8k"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown shape name(s) B8-T9-L8k" in err and "--list-shapes" in err
    assert bench.main(["--list-shapes"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) == 90 and "B8-T9-H32/8/128-L8192" in names


def test_other_head_dims_give_the_same_grid_at_that_dim(capsys):
    assert bench.main(["--list-shapes", "--head-dim", "256"]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) == 90 and "B8-T9-H32/8/256-L8192" in names and not any("/128-" in n for n in names)
    # a name of the default grid is unknown at another head dim, and the hint says how to list them
    with pytest.raises(SystemExit):
        bench.main(["--head-dim", "64", "--shapes", "B8-T9-H32/8/128-L8192"])
    assert "--list-shapes --head-dim 64" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--head-dim", "96"])
    assert "invalid choice: 96" in capsys.readouterr().err
