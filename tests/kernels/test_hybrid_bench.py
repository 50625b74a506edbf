"""The hybrid benchmark's tile sweep picks a tile from what ran (no GPU needed: the timing is faked)."""

from __future__ import annotations


def test_a_sweep_shape_no_tile_can_run_leaves_the_others_to_decide(monkeypatch, capsys):
    """One shape that every tile fails (out of memory, a compile error) made the sweep end in
    "min() arg is an empty sequence" before the table ran; it is left out of the ranking, named."""
    import specdec_kernels.hybrid_bench as bench
    import specdec_kernels.hybrid_configs as configs

    monkeypatch.setattr(configs, "hybrid_config", lambda device: configs.HYBRID_CONFIGS["sm_90"])
    broken = bench.SWEEP_SHAPES[2]
    fastest = bench.tile_label(bench.SWEEP_TILES[3])

    def run_shape(shape, ceilings, seed, config=None, only_verify=False, alternative=True):
        if shape == broken:
            raise RuntimeError("out of resources")
        tile = next(t for t in bench.SWEEP_TILES if bench.tile_config(configs.HYBRID_CONFIGS["sm_90"], t) == config)
        return {"shape": shape.name, "ok": True, "us": 1.0 if bench.tile_label(tile) == fastest else 2.0}

    monkeypatch.setattr(bench, "run_shape", run_shape)
    rows, tile = bench.run_sweep({})
    assert bench.tile_label(tile) == fastest
    assert len(rows) == len(bench.SWEEP_TILES) * len(bench.SWEEP_SHAPES)
    assert f"{broken.name} ran with no tile" in capsys.readouterr().err


def test_a_sweep_where_nothing_ran_keeps_the_tables_row(monkeypatch, capsys):
    import specdec_kernels.hybrid_bench as bench
    import specdec_kernels.hybrid_configs as configs

    monkeypatch.setattr(configs, "hybrid_config", lambda device: configs.HYBRID_CONFIGS["sm_90"])

    def run_shape(shape, ceilings, seed, config=None, only_verify=False, alternative=True):
        raise RuntimeError("no GPU after all")

    monkeypatch.setattr(bench, "run_shape", run_shape)
    _, tile = bench.run_sweep({})
    assert tile == {}
    assert "the table keeps its own row" in capsys.readouterr().err
