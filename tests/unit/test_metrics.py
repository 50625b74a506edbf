"""metrics: aggregation, guards and server-side figures (no server needed)."""

from __future__ import annotations

import math
import re

import pytest

from pytest_specdec.metrics import (
    METRIC_DIRECTIONS,
    MeasurementError,
    MetricValue,
    Percentiles,
    RequestRecord,
    ServerFigures,
    WorkloadResult,
    check_no_errors,
    check_speculation,
    check_tokens,
    chance_acceptance,
    combine_repeats,
    poisson_tail,
    compare_accept_length,
    direction_of,
    measure,
    parse_ddtree_lines,
    parse_decode_lines,
    parse_prometheus_text,
    ratio_standard_error,
    read_log_since,
    server_figures_from_log,
    server_figures_from_log_file,
    server_figures_from_metrics,
    summarize,
)


def rec(i=0, *, tokens=100, verify=None, correct=None, proposed=None, ttft=10.0, e2e=110.0,
        status=200, error=None, finish="length", rate=None) -> RequestRecord:
    return RequestRecord(
        index=i, status=status, error=error, finish_reason=finish, prompt_tokens=20,
        completion_tokens=tokens, ttft_ms=ttft, e2e_ms=e2e, chunks=tokens,
        spec_verify_ct=verify, spec_accept_length=(tokens / verify if verify else None),
        spec_accept_rate=rate, spec_num_correct_drafts=correct, spec_num_proposed_drafts=proposed,
    )


def result(*records, wall=1.0, name="chat") -> WorkloadResult:
    return WorkloadResult(workload=name, url="http://127.0.0.1:1", concurrency=4, records=tuple(records), wall_s=wall)


# ------------------------------------------------------------------ basics


def test_directions_cover_the_contract():
    assert {k: METRIC_DIRECTIONS[k] for k in ("output_tok_s", "accept_length", "accept_rate")} == {
        "output_tok_s": "higher", "accept_length": "higher", "accept_rate": "higher"}
    for lower in ("ttft_ms", "tpot_ms", "verify_us"):
        assert direction_of(lower) == "lower"
    with pytest.raises(KeyError, match="unknown metric 'nope': give its direction explicitly"):
        direction_of("nope")
    with pytest.raises(KeyError, match=r"unknown metric 'tpot_sm': did you mean 'tpot_ms'\? give its direction"):
        direction_of("tpot_sm")


def test_percentiles_interpolate_linearly_between_order_statistics():
    p = Percentiles.of([4.0, 1.0, 3.0, 2.0])
    assert (p.p50, p.p90, p.p99, p.mean) == (2.5, pytest.approx(3.7), pytest.approx(3.97), 2.5)
    assert Percentiles.of([float(v) for v in range(101)]).p90 == pytest.approx(90.0)


def test_percentiles_of_single_value_have_no_spread():
    p = Percentiles.of([5.0])
    assert (p.p50, p.p99, p.n, p.spread) == (5.0, 5.0, 1, 0.0)


def test_ratio_standard_error_zero_when_ratios_identical_and_positive_otherwise():
    assert ratio_standard_error([30, 60, 90], [10, 20, 30]) == 0.0
    assert ratio_standard_error([30, 40, 90], [10, 20, 30]) > 0
    assert ratio_standard_error([1], [1]) == 0.0


def test_request_record_tpot_and_ok():
    r = rec(tokens=11, ttft=10.0, e2e=110.0)
    assert r.tpot_ms == pytest.approx(10.0)
    assert rec(tokens=1).tpot_ms is None
    assert r.ok
    assert not rec(error="boom").ok
    assert not rec(status=500).ok


def test_metric_value_rejects_bad_direction_and_nan():
    with pytest.raises(ValueError, match="direction"):
        MetricValue("x", 1.0, "up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not finite"):
        MetricValue("x", math.nan, "higher")


# ------------------------------------------------------------------ aggregation


def test_summarize_accept_length_is_ratio_of_sums_not_mean_of_ratios():
    # per-request ratios 2.0 and 4.0 average 3.0; SGLang's figure is the ratio of sums, 120 / 35
    m = summarize(result(rec(0, tokens=20, verify=10), rec(1, tokens=100, verify=25), wall=2.0))
    assert m.accept_length == pytest.approx(120 / 35)
    assert m.accept_length != pytest.approx((2.0 + 4.0) / 2)
    assert m.spec_verify_ct == 35
    assert m.output_tok_s == pytest.approx(60.0)
    assert m.completion_tokens == 120
    assert m.prompt_tokens == 40


def test_summarize_accept_rate_from_draft_counts():
    m = summarize(result(rec(0, tokens=40, verify=10, correct=30, proposed=150),
                         rec(1, tokens=40, verify=10, correct=30, proposed=50)))
    assert m.accept_rate == pytest.approx(60 / 200)


def test_summarize_accept_rate_falls_back_to_verify_weighted_reported_rate():
    m = summarize(result(rec(0, tokens=40, verify=10, rate=0.5), rec(1, tokens=90, verify=30, rate=0.9)))
    assert m.accept_rate == pytest.approx((0.5 * 10 + 0.9 * 30) / 40)


def test_summarize_non_speculative_has_no_accept_figures():
    m = summarize(result(rec(0), rec(1)))
    assert m.accept_length is None and m.accept_rate is None and m.spec_verify_ct is None
    names = [v.name for v in m.metrics()]
    assert names == ["output_tok_s", "ttft_ms", "tpot_ms"]


def test_summarize_latency_percentiles():
    records = [rec(i, tokens=11, ttft=float(10 + i), e2e=float(110 + i)) for i in range(10)]
    m = summarize(result(*records))
    assert m.ttft_ms.p50 == pytest.approx(14.5)
    assert m.ttft_ms.p90 == pytest.approx(18.1)
    assert m.ttft_ms.p99 == pytest.approx(18.91)
    assert m.tpot_ms is not None and m.tpot_ms.p50 == pytest.approx(10.0)
    assert m.e2e_ms.p50 == pytest.approx(114.5)
    assert m.ttft_ms.spread > 0


def test_metrics_carry_directions_spreads_and_determinism():
    records = [rec(i, tokens=100 + 10 * i, verify=30 + i, e2e=100.0 + 5 * i) for i in range(6)]
    m = summarize(result(*records))
    by_name = {v.name: v for v in m.metrics()}
    assert set(by_name) == {"output_tok_s", "accept_length", "ttft_ms", "tpot_ms"}
    assert by_name["ttft_ms"].direction == "lower"
    assert by_name["accept_length"].direction == "higher"
    assert by_name["accept_length"].spread > 0 and not by_name["accept_length"].deterministic
    assert by_name["output_tok_s"].spread > 0
    assert all(v.samples == 6 for v in by_name.values())
    det = {v.name: v for v in m.metrics(deterministic_accept=True)}
    # deterministic run to run, yet it keeps the requests' spread: the report's bars draw it (they
    # were always absent, though the caption promised them)
    assert det["accept_length"].deterministic
    assert det["accept_length"].spread == by_name["accept_length"].spread > 0
    assert not det["output_tok_s"].deterministic


def test_summarize_refuses_partial_and_empty_results():
    with pytest.raises(MeasurementError, match="1 of 2 requests failed"):
        summarize(result(rec(0), rec(1, status=500, error="HTTP 500: boom")))
    with pytest.raises(MeasurementError, match="ran no requests"):
        summarize(result())
    with pytest.raises(MeasurementError, match="no request produced a first token"):
        summarize(result(rec(0, ttft=None)))


def test_summarize_refuses_a_wall_time_of_zero():
    with pytest.raises(MeasurementError, match=r"wall time 0\.0 s is not positive"):
        summarize(result(rec(0), wall=0.0))


def test_combine_repeats_mean_and_spread():
    a = MetricValue("output_tok_s", 100.0, "higher", spread=1.0, samples=8)
    b = MetricValue("output_tok_s", 110.0, "higher", spread=1.0, samples=8)
    c = combine_repeats([a, b])
    assert c.value == 105.0 and c.samples == 16
    assert c.spread == pytest.approx(5.0)  # stdev 7.07 / sqrt 2
    same = combine_repeats([a, a])
    assert same.spread == pytest.approx(math.sqrt(2) / 2)  # per-run noise kept as a floor
    with pytest.raises(ValueError, match="different metrics"):
        combine_repeats([a, MetricValue("ttft_ms", 1.0, "lower")])


# ------------------------------------------------------------------ guards


def test_check_tokens_names_status_finish_reason_and_log_tail():
    res = result(rec(0, tokens=0, finish="stop", ttft=None), rec(1, tokens=0, finish="stop", ttft=None))
    with pytest.raises(MeasurementError) as info:
        check_tokens(res, log_tail=lambda: "line A\nCUDA error: an illegal instruction was encountered")
    msg = str(info.value)
    assert "zero completion tokens for all 2 requests" in msg
    assert "HTTP 200" in msg and "finish_reason=stop" in msg
    assert "last server log lines:" in msg and "illegal instruction" in msg


def test_check_tokens_partial_zero_and_passes_when_all_have_tokens():
    with pytest.raises(MeasurementError, match="1 of 2 requests produced zero"):
        check_tokens(result(rec(0), rec(1, tokens=0)))
    check_tokens(result(rec(0), rec(1)))


def test_log_tail_hook_is_lazy_and_its_failure_is_reported():
    calls = []
    check_tokens(result(rec(0)), log_tail=lambda: calls.append(1) or "x")
    assert calls == []

    def broken() -> str:
        raise OSError("log gone")

    with pytest.raises(MeasurementError, match="could not read the server log tail: log gone"):
        check_tokens(result(rec(0, tokens=0)), log_tail=broken)


def test_an_empty_server_log_is_said_so():
    with pytest.raises(MeasurementError, match=r"\(server log is empty\)"):
        check_tokens(result(rec(0, tokens=0)), log_tail=lambda: "\n")


def test_check_no_errors_lists_requests_and_truncates_listing():
    bad = [rec(i, status=503, error=f"HTTP 503: overloaded {i}") for i in range(8)]
    with pytest.raises(MeasurementError) as info:
        check_no_errors(result(rec(99), *bad), log_tail="tail text")
    msg = str(info.value)
    assert "8 of 9 requests failed" in msg
    assert re.search(r"request 1: HTTP 503, [^\n]*overloaded 0\n", msg), msg  # the first, counted from 1
    assert "... and 3 more" in msg and "tail text" in msg
    assert "partial run" in msg


def test_check_no_errors_connection_failure_says_no_response():
    with pytest.raises(MeasurementError, match="HTTP no response"):
        check_no_errors(result(rec(0, status=0, error="ClientConnectorError: refused", tokens=0)))


def test_speculation_inactive_is_reported():
    with pytest.raises(MeasurementError, match="speculative decoding is not active on this server"):
        check_speculation(result(rec(0), rec(1)), "ddtree")


@pytest.mark.parametrize("method", [None, "ar", "AR", "none"])
def test_speculation_not_required_for_autoregressive(method):
    check_speculation(result(rec(0), rec(1)), method)


def test_never_accepted_drafts_fail_unless_allowed():
    # 256 tokens from 255 verify steps + the prefill token: nothing accepted
    res = result(rec(0, tokens=256, verify=255), rec(1, tokens=256, verify=255))
    with pytest.raises(MeasurementError, match=r"no better than chance.*: 0 accepted in 510 verify steps "
                                               r"\(0\.000 per step, accept length 1\.00\); drafts were never accepted"):
        check_speculation(res, "dflash")
    check_speculation(res, "dflash", min_accept_length=1.0)


def noise_like(budget: int, per_step: float, steps: int = 500) -> WorkloadResult:
    """A ddtree workload whose drafts were accepted `per_step` times a step on average."""
    accepted = round(per_step * steps)
    return result(rec(0, tokens=steps + accepted + 1, verify=steps, correct=accepted, proposed=steps * budget))


@pytest.mark.parametrize("budget", [8, 16, 32, 64])
def test_a_random_drafter_is_red_at_every_budget(budget):
    """A random draft of B nodes over V tokens accepts at most B / V drafts a step: at that rate
    (the noise drafter's, at best) the guard is red; it does not pass a fixed 1.05 either way."""
    with pytest.raises(MeasurementError, match=rf"a random draft of {budget} nodes over a 259-token "
                                               rf"vocabulary accepts up to {budget / 259:.3f} per step by chance"):
        check_speculation(noise_like(budget, budget / 259), "ddtree", vocab_size=259)


@pytest.mark.parametrize("budget", [8, 16, 32, 64])
def test_a_drafter_that_beats_chance_is_green_at_every_budget(budget):
    check_speculation(noise_like(budget, 2 * budget / 259 + 0.05), "ddtree", vocab_size=259)


def test_an_unknown_vocabulary_only_needs_some_accepted_drafts():
    check_speculation(noise_like(64, 0.01), "ddtree")  # 5 accepted: a large vocabulary's chance is ~0
    with pytest.raises(MeasurementError, match="drafts were never accepted"):
        check_speculation(noise_like(64, 0.0), "ddtree")


def test_chance_and_poisson_tail():
    assert chance_acceptance(64, 259) == pytest.approx(64 / 259)
    assert chance_acceptance(None, 259) == chance_acceptance(16, None) == 0.0
    assert poisson_tail(0, 3.0) == 1.0 and poisson_tail(1, 0.0) == 0.0
    assert poisson_tail(1, 2.0) == pytest.approx(1 - math.exp(-2.0))
    assert poisson_tail(3, 2.0) == pytest.approx(1 - math.exp(-2.0) * (1 + 2 + 2))
    assert poisson_tail(5000, 10.0) == 0.0


def test_zero_correct_drafts_fail_even_for_short_outputs():
    res = result(rec(0, tokens=16, verify=15, correct=0, proposed=225))
    with pytest.raises(MeasurementError, match="never accepted"):
        check_speculation(res, "ddtree")


def test_the_servers_count_of_correct_drafts_wins_over_token_arithmetic():
    """101 tokens in 100 verify steps read as nothing accepted by the token arithmetic (the
    fallback for servers that send no counts); a server that counted 40 correct drafts is believed."""
    check_speculation(result(rec(0, tokens=101, verify=100, correct=40, proposed=1600)), "ddtree")


def test_min_accept_length_threshold():
    res = result(rec(0, tokens=300, verify=100))
    check_speculation(res, "ddtree")
    check_speculation(res, "ddtree", min_accept_length=3.0)
    with pytest.raises(MeasurementError, match="below min_accept_length 3.5"):
        check_speculation(res, "ddtree", min_accept_length=3.5)


def test_measure_runs_guards_then_summarizes():
    m = measure(result(rec(0, tokens=300, verify=100)), method="ddtree")
    assert m.accept_length == pytest.approx(3.0)
    with pytest.raises(MeasurementError, match="not active"):
        measure(result(rec(0)), method="ddtree")
    with pytest.raises(MeasurementError, match="failed"):
        measure(result(rec(0, tokens=0, error="HTTP 500: x", status=500)), method="ddtree")
    with pytest.raises(MeasurementError, match="zero completion tokens"):
        measure(result(rec(0, tokens=0)))  # summarize alone would report 0 tok/s


# ------------------------------------------------------------------ server-side figures

NEW_LINE = ("[2026-11-29 23:42:31 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: 0.12, "
            "accept len: 3.21, accept rate: 0.55, cuda graph: True, gen throughput (token/s): 1234.56, #queue-req: 0")
OLD_LINE = ("[2025-01-02 10:00:00 TP0] Decode batch. #running-req: 4, #token: 999, token usage: 0.01, "
            "accept len: 2.50, gen throughput (token/s): 300.00, #queue-req: 0, ")
PLAIN_LINE = "[gpu=0] Decode batch. #running-req: 2, #token: 10, token usage: 0.00, gen throughput (token/s): 55.50, #queue-req: 1"
#: with SGLANG_LOG_FORWARD_ITERS=1 SGLang tags the line with its forward iteration
ITER_LINE = NEW_LINE.replace("Decode batch,", "Decode batch [4096],")
DDTREE_LINE = "[TP0] ddtree stats: avg_accepted_drafts=4.25 avg_commit_len=5.25 avg_accepted_depth=4.10 budget=16"


def test_parse_decode_lines_new_old_and_plain_forms():
    parsed = parse_decode_lines([NEW_LINE, "unrelated INFO line", OLD_LINE, PLAIN_LINE])
    assert len(parsed) == 3
    new, old, plain = parsed
    assert (new.running_req, new.accept_len, new.accept_rate, new.gen_throughput) == (8, 3.21, 0.55, 1234.56)
    assert (old.running_req, old.accept_len, old.accept_rate, old.gen_throughput) == (4, 2.50, None, 300.0)
    assert (plain.accept_len, plain.gen_throughput) == (None, 55.5)


def test_parse_decode_lines_reads_a_line_tagged_with_its_forward_iteration():
    (tagged,) = parse_decode_lines([ITER_LINE])
    assert (tagged.running_req, tagged.accept_len, tagged.accept_rate) == (8, 3.21, 0.55)
    assert server_figures_from_log(ITER_LINE).accept_length == pytest.approx(3.21)


def test_parse_ddtree_lines_including_partial_forks():
    parsed = parse_ddtree_lines([DDTREE_LINE, "avg_accepted_drafts=0.00", NEW_LINE])
    assert parsed[0].avg_commit_len == 5.25 and parsed[0].avg_accepted_depth == 4.10
    assert parsed[1].avg_accepted_drafts == 0.0 and parsed[1].avg_commit_len is None
    assert len(parsed) == 2


def test_server_figures_from_log_average_and_ddtree_fallback():
    second = NEW_LINE.replace("accept len: 3.21", "accept len: 3.01").replace("1234.56", "1000.00")
    fig = server_figures_from_log("\n".join([NEW_LINE, second]))
    assert fig.accept_length == pytest.approx(3.11)
    assert fig.gen_throughput == pytest.approx(1117.28)
    assert fig.lines == 2
    dd = server_figures_from_log(DDTREE_LINE + "\n" + PLAIN_LINE)
    assert dd.accept_length == pytest.approx(5.25) and dd.avg_accepted_depth == pytest.approx(4.10)
    only_drafts = server_figures_from_log("x avg_accepted_drafts=1.50 y")
    assert only_drafts.accept_length == pytest.approx(2.50)
    assert server_figures_from_log("nothing here").accept_length is None


def test_server_figures_from_log_whole_intervals_only_leaves_the_first_interval_out():
    second = NEW_LINE.replace("accept len: 3.21", "accept len: 3.01")
    third = NEW_LINE.replace("accept len: 3.21", "accept len: 2.81")
    dd_second = DDTREE_LINE.replace("avg_commit_len=5.25", "avg_commit_len=4.25")
    text = "\n".join([NEW_LINE, DDTREE_LINE, second, dd_second, third, dd_second])
    fig = server_figures_from_log(text, whole_intervals_only=True)
    assert fig.accept_length == pytest.approx(2.91)
    assert fig.lines == 4
    dd = server_figures_from_log(DDTREE_LINE + "\n" + dd_second, whole_intervals_only=True)
    assert dd.accept_length == pytest.approx(4.25)
    alone = server_figures_from_log(NEW_LINE + "\n" + DDTREE_LINE, whole_intervals_only=True)
    assert alone.accept_length is None and alone.lines == 0


def test_read_log_since_offset(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(OLD_LINE + "\n")
    _, offset = read_log_since(log)
    with open(log, "a") as fh:
        fh.write(NEW_LINE + "\n")
    text, end = read_log_since(log, offset)
    assert OLD_LINE not in text and NEW_LINE in text
    assert end == log.stat().st_size
    fig = server_figures_from_log_file(log, offset)
    assert fig.accept_length == pytest.approx(3.21) and fig.source == str(log)


PROM = """# HELP sglang:spec_accept_length The average acceptance length
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m",tp_rank="0"} 3.5
sglang:spec_accept_length{model_name="m",tp_rank="1"} 3.7
sglang:spec_accept_rate{model_name="m"} 0.61
sglang:gen_throughput{model_name="m"} 812.4
sglang:generation_tokens_total{model_name="m"} 1.2e+04
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
"""


def test_parse_prometheus_text_and_figures():
    samples = parse_prometheus_text(PROM)
    assert samples["sglang:generation_tokens_total"] == [({"model_name": "m"}, 12000.0)]
    assert samples["sglang:time_to_first_token_seconds_bucket"][0][0] == {"le": "0.1", "model_name": "m"}
    fig = server_figures_from_metrics(PROM)
    assert fig.accept_length == pytest.approx(3.6)
    assert fig.accept_rate == pytest.approx(0.61)
    assert fig.gen_throughput == pytest.approx(812.4)
    assert server_figures_from_metrics("").accept_length is None


def test_metrics_spec_gauges_at_zero_are_no_figure():
    """SGLang sets both spec gauges to 0 on a server without speculation and serves them at 0
    before its first decode interval; an accept length is at least 1 where a step was verified."""
    off = ('sglang:spec_accept_length{model_name="m"} 0.0\nsglang:spec_accept_rate{model_name="m"} 0.0\n'
           'sglang:gen_throughput{model_name="m"} 0.0\n')
    fig = server_figures_from_metrics(off)
    assert (fig.accept_length, fig.accept_rate, fig.gen_throughput) == (None, None, 0.0)
    assert compare_accept_length(2.5, fig) is None
    # a DP group that has not logged a speculative interval yet does not halve the others' figure
    groups = ('sglang:spec_accept_length{dp_rank="0"} 3.0\nsglang:spec_accept_length{dp_rank="1"} 0.0\n'
              'sglang:spec_accept_rate{dp_rank="0"} 0.4\nsglang:spec_accept_rate{dp_rank="1"} 0.0\n')
    fig = server_figures_from_metrics(groups)
    assert (fig.accept_length, fig.accept_rate) == (pytest.approx(3.0), pytest.approx(0.4))


def test_parse_prometheus_text_rejects_what_is_not_prometheus():
    with pytest.raises(ValueError, match="not Prometheus' text format"):
        parse_prometheus_text("garbage line without value\n")


def test_compare_accept_length_beyond_rounding_only():
    assert compare_accept_length(3.214, 3.21) is None
    d = compare_accept_length(3.30, ServerFigures(source="server log", accept_length=3.21))
    assert d is not None
    assert "client 3.300 vs server log 3.210" in str(d)
    assert compare_accept_length(3.30, 3.21, slack=0.1) is None
    assert compare_accept_length(3.12, 3.21) is not None  # a client figure below the server's too
    assert compare_accept_length(None, 3.2) is None
    assert compare_accept_length(3.2, ServerFigures(source="/metrics")) is None
    assert compare_accept_length(3.2, 3.0, decimals=0) is None
