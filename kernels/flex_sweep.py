"""FlexAttention against the verify kernel over a grid of shapes, its compiles spread over processes.

    python -m specdec_kernels.flex_sweep --out DIR                 # the whole grid, 14 processes
    python -m specdec_kernels.flex_sweep --out DIR --quick --processes 4
    python -m specdec_kernels.flex_sweep --out DIR --resume        # finish a run cut short

FlexAttention is a torch.compile of its own for every shape (tens of seconds of CPU each): one
after another, a grid of ~200 shapes would hold a GPU for over an hour, most of it idle. Here each
worker process compiles one shape at a time and times it only while it holds the GPU's lock, so
the compiles of some shapes overlap the timing of another. Per shape, under the lock: the verify
kernel in a CUDA graph over rotating input sets (as the bench times it), FlexAttention's compiled
call under ``do_bench`` (as the bench times it), both with L2 flushed by a read before each
timed call, and both outputs against a float32 reference. The rows go to ``DIR/flex.jsonl`` as
they come (a run cut short keeps them); the summary names every shape where FlexAttention was
faster and every shape where it did not compile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

LOCK_NAME = "gpu.lock"
ROWS_NAME = "flex.jsonl"
# rows of earlier sweeps (which compiled FlexAttention without a fresh start per shape) are not resumed
ROW_FORMAT = 2
# a worker's Inductor compiles in its own process: the pool's workers are the parallelism
COMPILE_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


def flex_row(shape, seed: int, lock_path: str) -> dict:
    """One shape: FlexAttention compiled outside the lock, then both kernels checked and timed
    holding it. A FlexAttention that does not compile or run leaves ``flex_error``."""
    import torch
    from filelock import FileLock

    from .bench import (ROW_TOLERANCE_BF16, error_line, input_sets_needed, l2_flush, make_inputs, row_error,
                        time_flex, time_in_graph)
    from .tree_verify_triton import tree_verify_attention_triton

    device = torch.device("cuda")
    sets = [make_inputs(shape, device, seed + i) for i in range(input_sets_needed(shape))]
    requests = sorted({0, shape.batch - 1})
    row = {"shape": shape.name, "format": ROW_FORMAT, "input_sets": len(sets)}
    flex = None
    try:
        flex = fresh_flex(sets[0], shape.num_nodes)
        flex()  # the compile, on this process's CPU
        torch.cuda.synchronize()
    except Exception as exc:  # a shape FlexAttention cannot take is reported, not fatal
        row["flex_error"] = error_line(exc)
    with FileLock(lock_path), l2_flush("read"):
        row["err"] = max(row_error(tree_verify_attention_triton(*s), *s, requests) for s in sets[:2])
        row["us"] = time_in_graph(tree_verify_attention_triton, sets)
        if "flex_error" not in row:
            row.update(time_flex(flex, sets[0], requests, row["us"]))
        torch.cuda.synchronize()
    row["ok"] = row["err"] <= ROW_TOLERANCE_BF16
    if "flex_err" in row:
        row["flex_ok"] = row["flex_err"] <= ROW_TOLERANCE_BF16
    del sets, flex
    torch.cuda.empty_cache()
    return row


def fresh_flex(inputs, num_nodes: int):
    """FlexAttention on ``inputs`` (:func:`bench.flex_runner`), compiled afresh: each shape is one
    more compile of flex_attention, and past dynamo's recompile limit for it a worker's later
    shapes would not compile (``flex_runner``'s fullgraph makes that raise rather than run unfused)."""
    import torch

    from .bench import flex_runner

    torch._dynamo.reset()
    return flex_runner(*inputs, num_nodes)


def _worker(task) -> dict:
    from .bench import error_line

    shape, seed, lock_path = task
    try:
        return flex_row(shape, seed, lock_path)
    except Exception as exc:  # the verify kernel itself failed: a row that says so, the sweep goes on
        return {"shape": shape.name, "format": ROW_FORMAT, "error": error_line(exc), "ok": False}


def _init_worker() -> None:
    os.environ.update(COMPILE_ENV)


def _pool_rows(tasks, processes: int):
    """The rows of ``tasks`` from ``processes`` spawned workers, as they finish."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(processes, initializer=_init_worker) as pool:
        yield from pool.imap_unordered(_worker, tasks, chunksize=1)


def out_of_memory(row: dict) -> bool:
    """Whether a row's kernel or FlexAttention ran out of GPU memory (beside other workers' shapes)."""
    return any(str(row.get(key, "")).startswith("OutOfMemoryError") for key in ("error", "flex_error"))


def load_rows(path: str) -> dict:
    """The last row of each shape in a sweep's rows file (empty where there is no file); a line that
    is not a sweep row is a ValueError naming it."""
    from .bench import read_json_lines

    expected = "expected one sweep row a line"
    rows = {}
    if not os.path.exists(path):
        return rows
    for number, row in read_json_lines(path, expected):
        if not isinstance(row, dict) or not isinstance(row.get("shape"), str):
            raise ValueError(f"{path}:{number}: not a sweep row (no shape name); {expected}")
        rows[row["shape"]] = row
    return rows


def sweep(shapes, out_dir: str, processes: int, seed: int = 0, log=print, pool_rows=_pool_rows,
          resume: bool = False) -> list[dict]:
    """Every shape's row, each appended to ``out_dir/flex.jsonl`` as it comes; progress on ``log``.
    The workers share the GPU's memory, which the lock does not govern: shapes that ran out of it
    run again one at a time after the rest (their second row, later in the file, is the one that
    counts). ``resume``: shapes that already have a row of this format there (not out of memory)
    keep it and are not run again, so that a run cut short is finished by the next."""
    os.makedirs(out_dir, exist_ok=True)
    lock_path, rows_path = os.path.join(out_dir, LOCK_NAME), os.path.join(out_dir, ROWS_NAME)
    rows, started = {}, time.time()
    if resume:
        wanted = {shape.name for shape in shapes}
        saved = load_rows(rows_path)
        rows = {name: row for name, row in saved.items()
                if name in wanted and row.get("format") == ROW_FORMAT and not out_of_memory(row)}
        stale = sum(name in wanted and saved[name].get("format") != ROW_FORMAT for name in saved)
        log(f"resuming {rows_path}: {len(rows)} of {len(shapes)} shapes timed already"
            + (f", {stale} rows of an earlier format timed again" if stale else ""))
    tasks = [(shape, seed + i, lock_path) for i, shape in enumerate(shapes) if shape.name not in rows]
    with open(rows_path, "a") as sink:
        def keep(row, label):
            rows[row["shape"]] = row
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            log(f"[{label} {time.time() - started:.0f}s] {describe(row)}")

        for done, row in enumerate(pool_rows(tasks, processes), 1):
            keep(row, f"{done}/{len(tasks)}")
        again = [task for task in tasks if out_of_memory(rows[task[0].name])]
        if again and processes > 1:
            log(f"{len(again)} shapes ran out of GPU memory beside other workers: again, one at a time")
            for done, row in enumerate(pool_rows(again, 1), 1):
                keep(row, f"again {done}/{len(again)}")
    return list(rows.values())


def describe(row: dict) -> str:
    """One line of a row: the ratio, or why there is none."""
    if "error" in row:
        return f"{row['shape']}: the verify kernel failed: {row['error']}"
    if "x_flex" in row:
        return (f"{row['shape']}: {row['x_flex']:.1f}x FlexAttention ({row['us']:.1f} us against "
                f"{row['flex_us']:.1f}; row errors {row['err']:.1e} and {row['flex_err']:.1e})")
    return f"{row['shape']}: {row['us']:.1f} us; FlexAttention did not run: {row.get('flex_error', '?')}"


def summary(rows) -> dict:
    """Faster / slower than FlexAttention where it ran, where it did not, wrong outputs."""
    ran = [r for r in rows if "x_flex" in r]
    return {"faster": sum(r["x_flex"] > 1 for r in ran),
            "slower": sorted(r["shape"] for r in ran if r["x_flex"] <= 1),
            "flex_did_not_run": sorted(r["shape"] for r in rows if "x_flex" not in r and "error" not in r),
            "wrong_or_failed": sorted(r["shape"] for r in rows if not r.get("ok", False)),
            "flex_wrong": sorted(r["shape"] for r in ran if not r.get("flex_ok", True)),
            "x_flex_min": min((r["x_flex"] for r in ran), default=None),
            "x_flex_median": sorted(r["x_flex"] for r in ran)[len(ran) // 2] if ran else None}


def _parser() -> argparse.ArgumentParser:
    """The command line's arguments (built before torch imports: ``--help`` needs none)."""
    parser = argparse.ArgumentParser(prog="python -m specdec_kernels.flex_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for flex.jsonl (appended) and the GPU lock")
    parser.add_argument("--quick", action="store_true", help="a few shapes of each head dim instead of the grid")
    parser.add_argument("--shapes", help="comma-separated shape names of the grid (default: all)")
    parser.add_argument("--processes", type=int, default=14, help="worker processes compiling at once (default 14)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows OUT/flex.jsonl holds already and time only the shapes it lacks")
    return parser


def main(argv=None) -> int:
    from .command_line import require

    require("python -m specdec_kernels.flex_sweep", "torch", "triton", parser=_parser, argv=argv)
    from .bench import run_shapes

    parser = _parser()
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error(f"--processes takes a positive count, not {args.processes}")
    known = run_shapes(full=True)
    shapes = run_shapes(full=not args.quick)
    if args.shapes:
        wanted = args.shapes.split(",")
        names = {s.name for s in known}
        unknown = [name for name in wanted if name not in names]
        if unknown:
            parser.error(f"unknown shape name(s) {', '.join(unknown)}: names look like {known[0].name} "
                         f"(python -m specdec_kernels.bench --list-shapes prints all {len(known)})")
        shapes = [s for s in known if s.name in set(wanted)]
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU found: the FlexAttention sweep needs one", file=sys.stderr)
        return 2
    try:
        rows = sweep(shapes, args.out, args.processes, log=lambda line: print(line, flush=True), resume=args.resume)
    except ValueError as exc:  # a rows file to resume that is not one
        parser.error(f"{exc} (start afresh in another --out, or without --resume)")
    result = summary(rows)
    print(json.dumps(result), flush=True)
    return 0 if not result["slower"] and not result["wrong_or_failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
