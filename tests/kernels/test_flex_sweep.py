"""The FlexAttention sweep's bookkeeping, on the CPU: its summary, its lines and its arguments.
(The sweep itself needs a GPU: tests/bench/test_faster_than_flex.py.)"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from specdec_kernels import flex_sweep  # noqa: E402
from specdec_kernels.bench import Shape  # noqa: E402


def _row(name, x_flex=None, **fields):
    row = {"shape": name, "us": 10.0, "err": 2e-3, "ok": True}
    if x_flex is not None:
        row.update(flex_us=10.0 * x_flex, x_flex=x_flex, flex_err=3e-3, flex_ok=True)
    row.update(fields)
    return row


def test_summary_sorts_shapes_by_outcome():
    rows = [_row("a", 6.0), _row("b", 0.9), _row("c", 1.0), _row("d", flex_error="OutOfResources: shared memory"),
            _row("e", 2.0, err=0.5, ok=False), _row("f", 3.0, flex_err=0.4, flex_ok=False),
            {"shape": "g", "error": "RuntimeError: boom", "ok": False}]
    result = flex_sweep.summary(rows)
    # equal is not faster
    assert result["faster"] == 3 and result["slower"] == ["b", "c"]
    assert result["flex_did_not_run"] == ["d"] and result["wrong_or_failed"] == ["e", "g"]
    assert result["flex_wrong"] == ["f"]
    assert result["x_flex_min"] == 0.9 and result["x_flex_median"] == 2.0
    empty = flex_sweep.summary([_row("d", flex_error="x")])
    assert empty["faster"] == 0 and empty["x_flex_min"] is None and empty["x_flex_median"] is None


def test_each_row_reads_as_one_line_with_its_ratio_or_why_not():
    assert flex_sweep.describe(_row("B1-T9-H32/8/128-L1024", 6.25)) == (
        "B1-T9-H32/8/128-L1024: 6.2x FlexAttention (10.0 us against 62.5; row errors 2.0e-03 and 3.0e-03)")
    line = flex_sweep.describe(_row("s", flex_error="OutOfResources: shared memory, Required: 264192"))
    assert line == "s: 10.0 us; FlexAttention did not run: OutOfResources: shared memory, Required: 264192"
    assert "the verify kernel failed: RuntimeError: boom" in flex_sweep.describe({"shape": "s", "error":
                                                                                 "RuntimeError: boom"})


def test_unknown_shapes_and_worker_counts_are_refused_before_any_gpu_work(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        flex_sweep.main(["--out", str(tmp_path), "--shapes", "B8-T9-H32/8/128-L8192,B8-T9-L8k"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown shape name(s) B8-T9-L8k" in err and "--list-shapes" in err
    with pytest.raises(SystemExit):
        flex_sweep.main(["--out", str(tmp_path), "--processes", "0"])
    assert "--processes takes a positive count, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        flex_sweep.main(["--quick"])
    assert "--out" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_without_a_gpu_it_says_so(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert flex_sweep.main(["--out", str(tmp_path), "--quick"]) == 2
    assert "no CUDA GPU found" in capsys.readouterr().err


def test_a_worker_whose_kernel_fails_leaves_a_row_that_says_so(monkeypatch):
    def fail(shape, seed, lock_path):
        raise RuntimeError("CUDA error: an illegal memory access\nmore")

    monkeypatch.setattr(flex_sweep, "flex_row", fail)
    shape = Shape(1, 9, 32, 8, 128, 1024)
    row = flex_sweep._worker((shape, 0, "lock"))
    assert row == {"shape": shape.name, "format": flex_sweep.ROW_FORMAT,
                   "error": "RuntimeError: CUDA error: an illegal memory access", "ok": False}


def test_shapes_out_of_gpu_memory_run_again_alone_and_every_row_is_kept(tmp_path):
    import json

    shapes = [Shape(1, 9, 32, 8, 128, 1024), Shape(32, 65, 32, 8, 128, 32768), Shape(8, 9, 64, 8, 128, 32768)]
    passes = []

    def pool_rows(tasks, processes):
        passes.append(([task[0].name for task in tasks], processes))
        for shape, seed, lock in tasks:
            assert lock == str(tmp_path / flex_sweep.LOCK_NAME)
            if len(passes) == 1 and shape.batch == 32:
                yield {"shape": shape.name, "error": "OutOfMemoryError: CUDA out of memory.", "ok": False}
            elif len(passes) == 1 and shape.batch == 8:
                yield _row(shape.name, flex_error="OutOfMemoryError: CUDA out of memory. Tried to allocate 4 GiB")
            else:
                yield _row(shape.name, 3.0)

    lines = []
    rows = flex_sweep.sweep(shapes, str(tmp_path), 4, log=lines.append, pool_rows=pool_rows)
    assert passes == [([s.name for s in shapes], 4), ([shapes[1].name, shapes[2].name], 1)]
    assert sorted(r["shape"] for r in rows) == sorted(s.name for s in shapes)
    assert all(r["x_flex"] == 3.0 for r in rows)
    saved = [json.loads(line) for line in (tmp_path / flex_sweep.ROWS_NAME).read_text().splitlines()]
    assert len(saved) == 5 and flex_sweep.out_of_memory(saved[1]) and not flex_sweep.out_of_memory(saved[-1])
    assert any("2 shapes ran out of GPU memory" in line for line in lines)
    assert lines[-1].startswith("[again 2/2 ")
    # one worker: nothing to gain by running again
    passes.clear()
    flex_sweep.sweep(shapes, str(tmp_path), 1, log=lines.append, pool_rows=pool_rows)
    assert len(passes) == 1


def test_each_shape_compiles_flex_attention_afresh_past_dynamos_recompile_limit(monkeypatch):
    """Past the limit FlexAttention raises rather than run uncompiled (a sweep once timed it so),
    and the sweep's workers compile each shape afresh: on the CPU, with the limit at 1. The limit
    is dynamo's, whatever the backend: the eager one traces each shape in ~0.1 s where inductor
    built a CPU kernel for ~10 s."""
    import functools

    import torch
    import torch._dynamo.config as dynamo_config

    from specdec_kernels.bench import flex_runner, make_inputs, row_error

    limit = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(dynamo_config, limit, 1)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    first, second = Shape(1, 9, 4, 2, 16, 64), Shape(1, 9, 4, 2, 16, 96)
    cpu = torch.device("cpu")
    torch._dynamo.reset()
    flex_runner(*make_inputs(first, cpu, 0), first.num_nodes)()
    inputs = make_inputs(second, cpu, 0)
    with pytest.raises(Exception, match="fullgraph|recompile"):
        flex_runner(*inputs, second.num_nodes)()
    out = flex_sweep.fresh_flex(inputs, second.num_nodes)()
    assert row_error(out, *inputs, [0]) < 1e-2
    torch._dynamo.reset()


def test_a_resumed_sweep_times_only_the_shapes_its_file_lacks(tmp_path):
    import json

    shapes = [Shape(1, 9, 32, 8, 128, 1024), Shape(8, 9, 32, 8, 128, 1024), Shape(32, 9, 32, 8, 128, 1024),
              Shape(1, 17, 32, 8, 128, 1024)]
    saved = [_row(shapes[0].name, 5.0, format=flex_sweep.ROW_FORMAT),
             _row(shapes[1].name, 300.0),  # an earlier sweep's row (no format): timed again
             {"shape": shapes[2].name, "format": flex_sweep.ROW_FORMAT, "error": "OutOfMemoryError: x", "ok": False},
             _row("B1-T9-H32/8/128-L8192", 4.0, format=flex_sweep.ROW_FORMAT)]  # not asked for: left out
    path = tmp_path / flex_sweep.ROWS_NAME
    path.write_text("".join(json.dumps(row) + "\n" for row in saved) + "\n")
    ran = []

    def pool_rows(tasks, processes):
        ran.extend(task[0].name for task in tasks)
        for task in tasks:
            yield _row(task[0].name, 3.0, format=flex_sweep.ROW_FORMAT)

    lines = []
    rows = flex_sweep.sweep(shapes, str(tmp_path), 2, log=lines.append, pool_rows=pool_rows, resume=True)
    assert ran == [s.name for s in shapes[1:]]
    assert {r["shape"]: r["x_flex"] for r in rows} == {shapes[0].name: 5.0, shapes[1].name: 3.0,
                                                       shapes[2].name: 3.0, shapes[3].name: 3.0}
    assert lines[0] == f"resuming {path}: 1 of 4 shapes timed already, 1 rows of an earlier format timed again"
    assert flex_sweep.load_rows(str(path))[shapes[1].name]["x_flex"] == 3.0  # the later row counts
    ran.clear()
    flex_sweep.sweep(shapes, str(tmp_path), 2, log=lines.append, pool_rows=pool_rows, resume=True)
    assert ran == []
    assert flex_sweep.load_rows(str(tmp_path / "none.jsonl")) == {}


@pytest.mark.parametrize("content,message", [
    ('{"shape": "a"}\nnot json\n', ":2: not JSON"),
    ('[1, 2]\n', ":1: not a sweep row (no shape name)"),
])
def test_a_file_to_resume_that_is_not_sweep_rows_is_refused_by_line(tmp_path, capsys, monkeypatch, content,
                                                                     message):
    import torch

    (tmp_path / flex_sweep.ROWS_NAME).write_text(content)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit) as exit_info:
        flex_sweep.main(["--out", str(tmp_path), "--quick", "--resume"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "without --resume" in err
    assert (tmp_path / flex_sweep.ROWS_NAME).read_text() == content  # nothing appended


def test_a_flex_attention_that_does_not_run_leaves_only_its_error_line():
    from specdec_kernels.bench import time_flex

    def flex():
        raise RuntimeError("no kernel for this shape\nsecond line")

    assert time_flex(flex, (), [0], kernel_us=10.0) == {"flex_error": "RuntimeError: no kernel for this shape"}
