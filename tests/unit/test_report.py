"""report: table, results.json, report.md, plots, report.tex and the GitHub step summary."""

from __future__ import annotations

import builtins
import json
import sys

import pytest

from report_support import row

from pytest_specdec.baselines import BaselineEntry
from pytest_specdec.gate import compare_metric, parse_tolerances
from pytest_specdec.metrics import MetricValue
from pytest_specdec.result import Result
from pytest_specdec.report import (
    RESULTS_FORMAT,
    ReportRow,
    format_table,
    render_markdown,
    results_document,
    row_from_result,
    verdict_of,
    write_github_summary,
    write_report,
)

TOL = parse_tolerances("output_tok_s:5%,accept_length:2%")


def regression():
    return compare_metric("t", MetricValue("output_tok_s", 812.4, "higher"),
                          BaselineEntry(901.0, "higher"), TOL["output_tok_s"])


def improvement():
    return compare_metric("t", MetricValue("accept_length", 3.5, "higher"),
                          BaselineEntry(3.21, "higher"), TOL["accept_length"])


def unchanged():
    return compare_metric("t", MetricValue("output_tok_s", 900.0, "higher"),
                          BaselineEntry(901.0, "higher"), TOL["output_tok_s"])


@pytest.fixture
def rows():
    return [
        row("ddtree", 1, 16, 812.4, 3.21, [regression()]),
        row("ddtree", 1, 8, 700.0, 2.9, [improvement(), unchanged()]),
        row("dflash", 1, None, 650.0, 2.5, [unchanged()]),
        row("ar", 1, None, 300.0),
        ReportRow(test_id="test_generation[ddtree-tp1-b32-chat]", config="ddtree-tp1-b32", workload="chat",
                  method="ddtree", tp=1, budget=32, outcome="failed",
                  reason="speculative decoding is not active on this server\nsecond line"),
    ]


def test_verdict_of():
    assert verdict_of([]) == ""
    assert verdict_of([regression(), improvement()]) == "regression"
    assert verdict_of([improvement(), unchanged()]) == "improved"
    assert verdict_of([unchanged()]) == "ok"
    new = compare_metric("t", MetricValue("output_tok_s", 1.0, "higher"), None, None)
    assert verdict_of([new]) == "new"
    ungated_better = compare_metric("t", MetricValue("output_tok_s", 2.0, "higher"), BaselineEntry(1.0, "higher"), None)
    assert verdict_of([ungated_better]) == "not gated"
    assert verdict_of([ungated_better, unchanged()]) == "ok"
    # one gated figure compared, another with no baseline entry: nothing gated it, so not "ok"
    gated_new = compare_metric("t", MetricValue("accept_length", 3.0, "higher"), None,
                               TOL["accept_length"])
    assert verdict_of([unchanged(), gated_new]) == "new"
    assert verdict_of([ungated_better, compare_metric("t", MetricValue("tpot_ms", 1.0, "lower"),
                                                      None, None)]) == "not gated"


def test_row_from_result(rows):
    r = rows[0]
    assert (r.config, r.method, r.tp, r.budget, r.workload) == ("ddtree-tp1-b16", "ddtree", 1, 16, "chat")
    assert r.metrics["output_tok_s"] == 812.4 and r.metrics["accept_length"] == 3.21
    assert r.verdict == "regression"
    assert r.comparisons == ("output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)",)
    assert rows[1].verdict == "improved" and len(rows[1].comparisons) == 1  # unchanged lines are not notes
    plain = row_from_result(Result("test_x", "t.py::test_x", metrics=(MetricValue("output_tok_s", 5.0, "higher"),)))
    assert plain.metrics == {"output_tok_s": 5.0} and plain.config == "test_x" and plain.verdict == ""



def test_results_json_says_where_a_server_ran():
    """The GPUs a measurement's server ran on were kept in the journal's details only, though the
    README said results.json carries them: a slow configuration's row could not be told by card."""
    placed = Result("test_x", "t.py::test_x", details={"gpus": "GPUs 4,5 (NVIDIA H200)"})
    assert row_from_result(placed).to_json()["gpus"] == "GPUs 4,5 (NVIDIA H200)"
    assert row_from_result(Result("test_x", "t.py::test_x")).to_json()["gpus"] is None  # a CPU host

def test_format_table(rows):
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["config", "workload", "tok/s", "accept", "len", "TTFT", "ms", "TPOT", "ms", "verdict"]
    body = "\n".join(lines)
    # sorted by method, tp, budget: ar, ddtree b8, b16, b32, dflash
    order = [line.split()[0] for line in lines[2:7]]
    assert order == ["ar-tp1", "ddtree-tp1-b8", "ddtree-tp1-b16", "ddtree-tp1-b32", "dflash-tp1"]
    b16 = next(line for line in lines if line.startswith("ddtree-tp1-b16"))
    assert "812.4" in b16 and "3.21" in b16 and "12.3" in b16 and "1.50" in b16 and "REGRESSION" in b16
    ar = next(line for line in lines if line.startswith("ar-tp1"))
    assert ar.split()[3] == "-"  # no accept length for autoregressive
    failed = next(line for line in lines if line.startswith("ddtree-tp1-b32"))
    assert failed.endswith("FAILED: speculative decoding is not active on this server")
    assert "against baseline:" in body
    assert "ddtree-tp1-b16 [chat]: output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)" in body
    assert format_table([]) == "pytest-specdec: no results"


def test_table_columns_align(rows):
    lines = format_table(rows).splitlines()[:7]
    rule = lines[1]
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    assert len(starts) == 7
    for line in lines[2:]:
        for s in starts[1:]:
            assert line[s - 2:s] == "  " or line[s - 1] == " "


def test_results_document_is_json_with_format_marker(rows):
    doc = results_document(rows, {"hardware": "cpu"})
    text = json.dumps(doc)
    back = json.loads(text)
    assert back["format"] == RESULTS_FORMAT and back["version"] == 1 and back["meta"] == {"hardware": "cpu"}
    assert len(back["results"]) == 5
    first = back["results"][0]
    assert set(first) >= {"test_id", "config", "workload", "method", "tp", "budget", "metrics", "verdict",
                          "comparisons", "outcome", "reason"}


def test_render_markdown(rows):
    md = render_markdown(rows, meta={"hardware": "cpu", "backend": "embedded"}, plots=["plots/tokens_per_s.png"])
    assert md.startswith("# pytest-specdec results\n")
    assert "- **hardware**: cpu" in md
    assert "| config | workload | tok/s | accept len | TTFT ms | TPOT ms | verdict |" in md
    assert "|---|---|---:|---:|---:|---:|---|" in md
    assert "| ddtree-tp1-b16 | chat | 812.4 | 3.21 | 12.3 | 1.50 | REGRESSION |" in md
    assert "## Against the baseline" in md and "`output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)`" in md
    assert "## Failures" in md and "second line" in md
    assert "![tokens_per_s](plots/tokens_per_s.png)" in md
    assert "No results." in render_markdown([])


def test_markdown_escapes_pipes():
    row = ReportRow(test_id="t", config="a|b", outcome="failed", reason="x | y")
    assert "a\\|b" in render_markdown([row])


def test_markdown_shows_names_as_written_where_a_renderer_reads_them():
    """GitHub's step summary dropped a workload's `<x>` as an HTML tag and read `*a*` as emphasis,
    `$d$` as math and `\\c` as an escape: the table and the failure headings named another workload."""
    markdown_it = pytest.importorskip("markdown_it")
    import html
    import re

    name = "<x> *a* `b` \\c $d$ ~e~ _f_ g_h | i"
    md = render_markdown([ReportRow(test_id=f"t[ar-tp1-{name}]", config="ar-tp1", workload=name,
                                    outcome="failed", reason="boom")])
    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)

    def text(fragment):
        return html.unescape(re.sub("<[^>]*>", "", fragment)).strip()

    cells = [text(c) for c in re.findall("<td>(.*?)</td>", rendered)]
    assert cells[1] == name
    assert text(re.search("<h3>(.*?)</h3>", rendered)[1]) == f"ar-tp1 [{name}]"
    assert "g_h" in md  # a name's inner underscores stay as they were, in report.md too


def test_a_usual_runs_report_reads_as_written_with_no_backslash_shown_or_added(rows):
    """The escaping of markup must not touch what a usual run names: `ddtree-tp8-b64`, `long_ctx`,
    `test_gen[ar-tp1-chat]`, `tok/s`, `5.0%` read in GitHub's rendering, and in report.md itself,
    as written (no `\\_` or `\\%` a reader of the file would see)."""
    markdown_it = pytest.importorskip("markdown_it")
    import html
    import re

    usual = [*rows, *(row(method, tp, budget, 812.4, 3.2, [regression()], workload=workload)
                      for method, tp, budget in (("ar", 1, None), ("ddtree", 8, 64))
                      for workload in ("long_ctx", "sharegpt-128", "5.0%"))]
    usual.append(ReportRow(test_id="test_gen[ar-tp1-chat]", config="ar-tp1", workload="chat", outcome="skipped",
                           reason="needs SPECDEC_DEVICE=cuda_0 for tok/s and TTFT ms at 5.0% of test_gen " * 2))
    md = render_markdown(usual)
    assert "\\" not in md, md
    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    visible = html.unescape(re.sub("<[^>]*>", "", rendered))
    for name in ("ddtree-tp8-b64", "long_ctx", "sharegpt-128", "[5.0%]", "tok/s", "TTFT ms", "test_gen",
                 "SPECDEC_DEVICE=cuda_0", "output_tok_s 812.4 < baseline 901.0 -5% (-9.8%)"):
        assert name in visible, name
    cells = [html.unescape(re.sub("<[^>]*>", "", c)) for c in re.findall("<td[^>]*>(.*?)</td>", rendered)]
    assert {"ddtree-tp8-b64 (test_generation)", "long_ctx", "5.0%", "sharegpt-128"} <= set(cells), cells


def test_markdown_code_spans_show_names_with_backticks_as_written():
    """A backtick in a name shown in a code span (`ar`tp1``) closed the span early: the rest read
    as markdown and the names of the baseline notes and of the set-aside reasons came out cut.
    Each span's fence is now longer than any backtick run inside, padded where one is at an end."""
    markdown_it = pytest.importorskip("markdown_it")
    import html
    import re

    rows = [ReportRow(test_id="t[a]", config="ar`tp1``", workload="w`*x*", comparisons=("tok/s `1` vs 2",)),
            ReportRow(test_id="t[b]", config="`dflash", workload="chat`", outcome="skipped", reason="why " * 20),
            ReportRow(test_id="t[c]", config=" ddtree ", workload=None, outcome="skipped", reason="why " * 20)]
    rendered = markdown_it.MarkdownIt("commonmark").render(render_markdown(rows))
    codes = [html.unescape(c) for c in re.findall("<code>(.*?)</code>", rendered)]
    assert sorted(codes) == sorted(["ar`tp1``", "tok/s `1` vs 2", "`dflash [chat`]", " ddtree "])
    assert "<li><code>ar`tp1``</code> [w`*x*]: " in html.unescape(rendered)  # the workload as written


def test_write_report_writes_every_file(rows, tmp_path):
    files = write_report(tmp_path / "report", rows, meta={"hardware": "cpu"})
    assert json.loads(files.results_json.read_text())["format"] == RESULTS_FORMAT
    md = files.markdown.read_text()
    assert "![tokens_per_s](plots/tokens_per_s.png)" in md
    assert "\\includegraphics[width=\\linewidth]{plots/accept_length.pdf}" in files.latex.read_text()
    assert [p.name for p in files.plots] == ["tokens_per_s.png", "tokens_per_s.pdf",
                                             "accept_length.png", "accept_length.pdf"]
    assert files.plot_error is None


@pytest.fixture
def without_matplotlib(monkeypatch):
    """Every import of matplotlib fails, as on a machine without the report extra."""
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)


def test_write_report_without_matplotlib_still_writes_the_rest(rows, tmp_path, without_matplotlib):
    files = write_report(tmp_path, rows)
    assert files.plots == () and "matplotlib" in (files.plot_error or "")
    assert "plots skipped" in files.markdown.read_text()
    assert files.latex.exists() and files.standalone.exists() and files.results_json.exists()


def test_plots_skipped_names_a_command_that_installs_matplotlib(rows, tmp_path, monkeypatch, without_matplotlib):
    """The note said `pip install 'pytest-specdec[report]'`, which the package index cannot serve
    (pytest-specdec is not published there): it names the report extra's own requirements."""
    from pytest_specdec import extras

    monkeypatch.setattr(extras, "missing", lambda extra: [])  # matplotlib is installed here
    files = write_report(tmp_path, rows)
    [requirement] = [r for r in extras.requirements("report") if r.startswith("matplotlib")]
    assert f"(pip install '{requirement}')" in (files.plot_error or "")
    assert "pytest-specdec[" not in files.markdown.read_text()


def test_a_plot_error_reads_as_written_in_report_md(rows, tmp_path, monkeypatch):
    """The note of why plots are missing was set in `_..._` unescaped, unlike the rest of report.md:
    a path's `_build_` or a `*` in the message read as emphasis, `<x>` was dropped as an HTML tag,
    a `_` at either end closed the note early, and a blank line in it ended the note."""
    markdown_it = pytest.importorskip("markdown_it")
    import html
    import re

    from pytest_specdec import plots

    message = "_tkagg <x> *a* b|c in /opt/my_env/_build_/lib/\n\n(2 ** 3) __init__.py_"

    def broken(*args, **kwargs):
        raise ImportError(message)

    monkeypatch.setattr(plots, "plot_rows", broken)
    files = write_report(tmp_path, rows)
    assert message in (files.plot_error or "")  # whole in ReportFiles; report.md has it on one line
    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(
        files.markdown.read_text())
    last = rendered.rstrip().rsplit("\n", 1)[-1]  # the note: one paragraph in emphasis, no markup inside
    assert re.fullmatch("<p><em>[^<>]*</em></p>", last), last
    assert html.unescape(last[len("<p><em>"):-len("</em></p>")]) == " ".join(files.plot_error.split())


def test_module_import_does_not_import_matplotlib():
    import subprocess

    code = "import sys, pytest_specdec.report; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_github_step_summary(rows, tmp_path):
    assert write_github_summary(rows, env={}) is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    path = write_github_summary(rows, env={"GITHUB_STEP_SUMMARY": str(target)})
    assert path == target
    text = target.read_text()
    assert text.startswith("earlier step\n")  # appended, never overwritten
    assert "| ddtree-tp1-b16 | chat | 812.4 |" in text


_APPEND_UNDER_A_FILE_SIZE_LIMIT = """
import pickle, sys
from pytest_specdec.report import write_github_summary
rows = pickle.loads(sys.stdin.buffer.read())
try:
    write_github_summary(rows, env={"GITHUB_STEP_SUMMARY": sys.argv[1]})
except OSError as exc:
    print(f"OSError {exc.filename}: {exc.strerror}")
else:
    print("written")
"""


def test_github_step_summary_is_appended_whole_or_not_at_all(rows, tmp_path):
    """A disk that fills mid-append (here: a file size limit the table's middle crosses) leaves
    the summary as it was, not half a table that later steps append after; the error names the
    file, for the warning."""
    import pickle
    import resource
    import signal
    import subprocess

    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    table = render_markdown(rows, title="pytest-specdec results").encode()
    limit = len("earlier step\n") + len(table) // 2

    def full_disk_mid_table():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    done = subprocess.run([sys.executable, "-c", _APPEND_UNDER_A_FILE_SIZE_LIMIT, str(target)],
                          input=pickle.dumps(rows), capture_output=True, preexec_fn=full_disk_mid_table,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert target.read_text() == "earlier step\n"
    assert done.stdout.decode().strip() == f"OSError {target}: File too large"


def test_the_verdict_keeps_the_cause_of_a_long_failure():
    """The table shortens a failure in the middle: what failed opens it, the why often ends it."""
    reason = ("server ddtree-tp1-b8 stalled: no token for 10.1s while 1 request was in flight (2 "
              "of 8 requests done); probe: process alive (pid 4242), /health_generate did not "
              "answer within 2s (log: /very/long/path/to/the/server.log)")
    regression = "regression against cpu.json:\naccept_length 1.20 < baseline 1.50 -2% (-20.0%)"
    table = format_table([ReportRow(test_id="t", config="ddtree-tp1-b8", outcome="failed",
                                    reason=reason),
                          ReportRow(test_id="u", config="ddtree-tp1-b16", outcome="failed",
                                    reason=regression)])
    stalled = next(line for line in table.splitlines() if line.startswith("ddtree-tp1-b8"))
    assert "FAILED: server ddtree-tp1-b8 stalled: no token for" in stalled
    assert stalled.endswith("/health_generate did not answer within 2s") and "..." in stalled
    assert "/very/long/path" not in stalled
    gate = next(line for line in table.splitlines() if line.startswith("ddtree-tp1-b16"))
    assert gate.endswith(
        "FAILED: regression against cpu.json: accept_length 1.20 < baseline 1.50 -2% (-20.0%)")


def test_a_row_without_a_workload_is_named_by_its_configuration_alone(tmp_path):
    """A merged failure of a test that ran no workload read `### ddtree-tp1-b16 [None]`."""
    from dataclasses import replace

    from pytest_specdec.report import ReportRow, write_report

    failed = ReportRow(test_id="test_x[ddtree-tp1-b16]", config="ddtree-tp1-b16", outcome="failed",
                       reason="boom")
    files = write_report(tmp_path / "rep", [replace(row("ar", 1, None, 10.0), workload=None), failed], plots=False)
    text = files.markdown.read_text()
    assert "### ddtree-tp1-b16 (test_x)\n" in text and "None" not in text  # named as the table names it


def test_an_error_reads_error_and_a_message_with_a_fence_keeps_its_code_block(tmp_path):
    """A server that crashed in setup showed `FAILED:` where pytest said ERROR; a reason holding
    ``` closed report.md's code block early."""
    from pytest_specdec.report import ReportRow, format_table, write_report

    crashed = ReportRow(test_id="test_x[ar-tp1]", config="ar-tp1", outcome="error",
                        reason="server ar-tp1 crashed during warm-up: boom")
    fenced = ReportRow(test_id="test_y[ar-tp1]", config="ar-tp1", workload="w", outcome="failed",
                       reason="AssertionError: see\n```\ncode\n```")
    assert "ERROR: server ar-tp1 crashed during warm-up: boom" in format_table([crashed])
    text = write_report(tmp_path, [crashed, fenced], plots=False).markdown.read_text()
    assert "````\nAssertionError: see\n```\ncode\n```\n````" in text


def test_a_long_skip_reason_is_whole_in_report_md_once_per_reason(tmp_path):
    """The verdict cell shortens a skip or xfail reason to 60 characters; report.md had no other
    place where it was whole."""
    from pytest_specdec.report import ReportRow, write_report

    reason = ("known issue sm120-smem: DDTree budget 64 needs 232 KB of shared memory per block, past "
              "the RTX PRO 6000's 100 KB; fixed upstream in a later release")
    rows = [ReportRow(test_id=f"test_x[ddtree-tp1-b{b}]", config=f"ddtree-tp1-b{b}", outcome="xfailed",
                      reason=reason) for b in (32, 64)]
    rows.append(ReportRow(test_id="test_x[ar-tp1]", config="ar-tp1", outcome="skipped", reason="short"))
    text = write_report(tmp_path, rows, plots=False).markdown.read_text()
    section = text.split("## Skipped and expected failures\n", 1)[1]
    assert section.count(reason) == 1 and "`ddtree-tp1-b32`, `ddtree-tp1-b64`" in section
    assert "short" not in section  # whole in its cell already


def test_a_configuration_with_no_result_takes_no_test_function_column(rows):
    """A merge's row for a configuration of a missing shard is named by the configuration alone:
    read as a test function of its own, it made every row say whose it was, "dflash-tp1
    (dflash-tp1)" among them."""
    from pytest_specdec.report import ReportRow, format_table

    missing = ReportRow(test_id="dflash-tp1", config="dflash-tp1", method="dflash", tp=1, outcome="error",
                        reason="no result: shard 2/3 is missing from the merge")
    lines = format_table([*rows, missing]).splitlines()
    assert not any(line.split()[0].endswith(")") or "(test_generation)" in line for line in lines if line.strip())
    assert any(line.startswith("dflash-tp1 ") and "no result: shard 2/3" in line for line in lines)


def test_rows_that_differ_only_in_other_parameters_say_which_they_are():
    """pytest-repeat's `--count 2` (or a test's own parametrize) gives one configuration and
    workload several tests: each row names its other parameters, instead of two rows that read
    as one result counted twice."""
    from pytest_specdec.report import ReportRow, format_table, render_markdown

    rows = [ReportRow(test_id=f"test_generation[ar-tp1-chat-{n}-2]", config="ar-tp1", workload="chat",
                      method="ar", tp=1, metrics={"output_tok_s": tok_s},
                      comparisons=(f"output_tok_s {tok_s} note",))
            for n, tok_s in ((1, 100.0), (2, 200.0))]
    rows.append(ReportRow(test_id="test_generation[dflash-tp1-chat-1-2]", config="dflash-tp1",
                          workload="chat", method="dflash", tp=1, metrics={"output_tok_s": 300.0}))
    lines = format_table(rows).splitlines()
    assert [line.split("  ")[0] for line in lines[2:5]] == ["ar-tp1 (1-2)", "ar-tp1 (2-2)", "dflash-tp1"]
    assert "  ar-tp1 (1-2) [chat]: output_tok_s 100.0 note" in lines
    assert "| ar-tp1 (2-2) | chat |" in render_markdown(rows)


def test_report_md_names_two_tests_of_one_configuration_as_the_table_does():
    """Two test functions measuring ar-tp1: the table said `ar-tp1 (test_a)` and `ar-tp1
    (test_b)`, but report.md's comparisons, failure headings and skip reasons said `ar-tp1`
    for both, so a reader could not tell whose regression or failure each was."""
    from pytest_specdec.report import ReportRow, render_markdown

    reason = "known issue: " + "x" * 80
    rows = [ReportRow(test_id=f"{fn}[ar-tp1-chat]", config="ar-tp1", workload="chat", method="ar", tp=1,
                      metrics={"output_tok_s": 1.0}, comparisons=(f"note of {fn}",), outcome=outcome,
                      reason=reason if outcome == "xfailed" else f"why {fn}")
            for fn, outcome in (("test_a", "failed"), ("test_b", "failed"), ("test_c", "xfailed"))]
    md = render_markdown(rows)
    assert "| ar-tp1 (test_a) | chat |" in md  # the table's names
    assert "- `ar-tp1 (test_a)` [chat]: `note of test_a`" in md and "- `ar-tp1 (test_b)` [chat]: `note of test_b`" in md
    assert "### ar-tp1 (test_a) [chat]\n\n```\nwhy test_a" in md and "### ar-tp1 (test_b) [chat]\n\n```\nwhy test_b" in md
    assert f"- xfailed: {reason} (`ar-tp1 (test_c) [chat]`)" in md


def test_a_resumed_row_says_so_where_its_verdict_would_be():
    """A test resumed from the journal is not compared again (the journal keeps its figures, not
    its verdict): its verdict cell read `-`, as if it had never been compared."""
    from dataclasses import replace

    from pytest_specdec.report import format_table, render_markdown

    rows = [replace(row("ar", 1, None, 300.0), reason="resumed from the journal"),  # as summary.rows has it
            row("dflash", 1, None, 650.0, 2.5)]
    assert "| ar-tp1 | chat | 300.0 | - | 12.3 | 1.50 | resumed |" in render_markdown(rows)
    assert format_table(rows).splitlines()[2].endswith("resumed")


def test_paths_are_made_relative_only_under_the_project_root():
    """A sibling folder whose name starts with the root's is not inside it, and a root at the
    file system's root would make every path relative."""
    from pytest_specdec.relpaths import relative

    root = "/work/proj"
    assert relative("(log: /work/proj/.specdec/a.log)", root) == "(log: .specdec/a.log)"
    assert relative("in /work/proj, /work/proj-2/x and /other/work/proj/y", root) \
        == "in ., /work/proj-2/x and /other/work/proj/y"
    assert relative("see /work/proj/a.log.", root) == "see a.log."
    assert relative("/x/y", "/") == "/x/y" and relative("/x/y", "rel") == "/x/y"


def test_plot_pages_are_listed_named_and_replaced(tmp_path):
    """A plot of more workloads than a page holds goes on further pages: report.md links each,
    saying which page of how many, report.tex captions each, and a later report of fewer
    workloads leaves none of the earlier pages behind."""
    pytest.importorskip("matplotlib")
    many = [row(method, 1, budget, 100.0 + i, 2.0, workload=f"w{i:02d}")
            for i in range(13) for method, budget in (("dflash", None), ("ddtree", 8))]
    files = write_report(tmp_path / "report", many)
    assert [p.name for p in files.plots][::2] == ["tokens_per_s.png", "tokens_per_s-2.png",
                                                 "accept_length.png", "accept_length-2.png"]
    md = files.markdown.read_text()
    assert "![tokens_per_s (page 1 of 2)](plots/tokens_per_s.png)\n" \
           "![tokens_per_s (page 2 of 2)](plots/tokens_per_s-2.png)\n" in md
    tex = files.latex.read_text()
    assert "\\includegraphics[width=\\linewidth]{plots/accept_length-2.pdf}" in tex
    assert "over the requests. (Page 2.)}" in tex and "fig:specdec-accept-length-2" in tex
    files = write_report(tmp_path / "report", many[:4])
    assert sorted(p.name for p in (tmp_path / "report" / "plots").iterdir()) == [
        "accept_length.pdf", "accept_length.png", "tokens_per_s.pdf", "tokens_per_s.png"]
    assert "![tokens_per_s](plots/tokens_per_s.png)" in files.markdown.read_text()


def test_markdown_meta_values_read_as_written():
    """The `- **key**: value` lines above the table showed a value's `<x>` as an HTML tag (dropped)
    and its `*a*` or `_f_` as emphasis, as the table's cells did before they were escaped."""
    markdown_it = pytest.importorskip("markdown_it")
    import html
    import re

    value = "<x> *a* `b` \\c $d$ ~e~ _f_ g_h | i"
    md = render_markdown([ReportRow(test_id="t", config="ar-tp1")], meta={"hardware_key": value, "n": 3})
    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    items = [html.unescape(re.sub("<[^>]*>", "", item)).strip() for item in re.findall("<li>(.*?)</li>", rendered)]
    assert items == [f"hardware_key: {value}", "n: 3"]
    assert "<strong>hardware_key</strong>" in rendered  # the key stays bold


def test_the_header_says_how_many_warmup_requests_came_before_each_workload():
    from dataclasses import replace

    from report_support import row

    measured = [replace(row("ar", 1, None, 300.0), warmup_requests=4),
                replace(row("ddtree", 1, 8, 700.0, 2.9), warmup_requests=4)]
    assert "- **warm-up**: 4 untimed requests before each workload, then a cache flush\n" in render_markdown(measured)
    mixed = [*measured, replace(row("ar", 1, None, 300.0, workload="long"), warmup_requests=0), row("ar", 1, None, 1.0,
                                                                                                    workload="old")]
    assert ("- **warm-up**: untimed requests before each workload, then a cache flush: chat 4, long 0; none "
            "recorded for 1 result(s) measured before the warm-up existed\n") in render_markdown(mixed)
    cold = [replace(r, warmup_requests=0) for r in measured]
    assert "- **warm-up**: none: each workload measured cold\n" in render_markdown(cold)
    assert "warm-up" not in render_markdown([row("ar", 1, None, 300.0)])  # an older journal's: nothing to say
