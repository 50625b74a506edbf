"""report.tex (a fragment to \\input) and report-standalone.tex (compiles by itself)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from report_support import row

from pytest_specdec.latex import render_fragment, speedups, tex_escape
from pytest_specdec.report import ReportRow, write_report

META = {"hardware": "NVIDIA H200 (sm_90, hopper) x8", "backend": "sglang"}


def rows(families=("hopper",)):
    out = []
    for family in families:
        out += [row("ar", 1, None, 300.0, family=family, ttft=20.0, tpot=3.3),
                row("dflash", 1, None, 650.0, 2.5, family=family, ttft=25.0, tpot=1.6),
                row("ddtree", 1, 16, 900.0, 3.4, family=family, ttft=30.0, tpot=1.1),
                row("ddtree", 1, 8, 700.0, 2.9, family=family, ttft=18.0, tpot=1.4)]
    out.append(ReportRow(test_id="test_generation[ddtree-tp1-b32-chat]", config="ddtree-tp1-b32",
                         workload="chat", method="ddtree", tp=1, budget=32, outcome="failed",
                         reason="speculative decoding is not active on this server"))
    return out


def test_tex_escape():
    assert tex_escape("ddtree_tp1 50% & $x#{y}~^\\") == (
        "ddtree\\_tp1 50\\% \\& \\$x\\#\\{y\\}\\textasciitilde{}\\textasciicircum{}\\textbackslash{}")
    # OT1 printed these as an em dash, an inverted ! and an inverted ?
    assert tex_escape("a|b<c>d") == "a\\textbar{}b\\textless{}c\\textgreater{}d"


def test_speedup_is_over_the_reference_method_of_the_same_family_and_tp():
    both = rows(("cpu", "hopper"))
    both[4] = row("ar", 1, None, 100.0, family="hopper")  # hopper's AR is faster than cpu's
    got = speedups(both)
    assert got[both[2].test_id] == pytest.approx(900.0 / 300.0)  # cpu ddtree b16 over cpu ar
    assert got[both[6].test_id] == pytest.approx(900.0 / 100.0)  # hopper ddtree b16 over hopper ar


def test_table_names_the_hardware_has_speedups_and_bolds_the_best():
    tex = render_fragment(rows(), ["plots/tokens_per_s.pdf"], meta=META)
    assert "\\usepackage{booktabs}" in tex.splitlines()[0]
    assert "on NVIDIA H200 (sm\\_90, hopper) x8, sglang backend" in tex
    assert "Method & TP & Budget & tokens/s & speedup vs AR & accept len & TTFT ms & TPOT ms \\\\" in tex
    assert "ar & 1 & -- & 300.0 & 1.00$\\times$ & -- & 20.0 & 3.30 \\\\" in tex
    assert ("ddtree & 1 & 16 & \\textbf{900.0} & \\textbf{3.00$\\times$} & \\textbf{3.40} & 30.0 & "
            "\\textbf{1.10} \\\\") in tex
    assert "ddtree & 1 & 8 & 700.0 & 2.33$\\times$ & 2.90 & \\textbf{18.0} & 1.40 \\\\" in tex
    assert "Family" not in tex and "b32" not in tex  # one family; failures are not results
    same = render_fragment([row("ar", 1, None, 300.0), row("dflash", 1, None, 650.0, 2.5)])
    assert "12.3 & 1.50 \\\\" in same and "\\textbf{12.3}" not in same  # a tie singles out nothing
    assert "\\includegraphics[width=\\linewidth]{plots/tokens_per_s.pdf}" in tex
    assert "Output tokens/s against the DDTree budget" in tex
    assert tex.count("\\begin{") == tex.count("\\end{") and "\\documentclass" not in tex


def test_a_table_without_an_ar_row_has_no_speedup_column():
    """The README's Blackwell matrix has no ar: its table had a "speedup vs AR" column of dashes
    under a caption explaining the speedup."""
    no_ar = [r for r in rows() if r.method != "ar"]
    tex = render_fragment(no_ar, meta=META)
    assert "Method & TP & Budget & tokens/s & accept len & TTFT ms & TPOT ms \\\\" in tex
    assert "ddtree & 1 & 16 & \\textbf{900.0} & \\textbf{3.40} & 30.0 & \\textbf{1.10} \\\\" in tex
    assert "speedup" not in tex.lower()
    assert "workload chat (on NVIDIA H200 (sm\\_90, hopper) x8, sglang backend). Bold: the best" in tex
    assert "\\begin{tabular}{lrrrrrr}" in tex  # as many columns as titles


def test_a_table_measured_without_a_gpu_says_it_ran_on_the_cpu():
    """The caption read "on no GPU, embedded backend"."""
    tex = render_fragment(rows(("cpu",)), meta={"hardware": "no GPU", "backend": "embedded"})
    assert "workload chat (on the CPU, embedded backend)." in tex and "no GPU" not in tex
    mixed = render_fragment(rows(("cpu",)), meta={"hardware": f"{META['hardware']}; no GPU"})
    assert "(on NVIDIA H200 (sm\\_90, hopper) x8; the CPU)." in mixed


def test_a_known_issue_that_passed_is_a_result_as_in_the_baseline():
    """An xpassed row (a known issue whose xfail is not strict, passing) was left out of
    report.tex and the plots, though its figures were saved as a baseline."""
    from dataclasses import replace

    from pytest_specdec.plots import _measured

    table = rows()
    table[2] = replace(table[2], outcome="xpassed", reason="known issue: crashes at budget 16")
    tex = render_fragment(table, meta=META)
    assert "ddtree & 1 & 16 & \\textbf{900.0}" in tex
    assert table[2] in _measured(table) and table[4] not in _measured(table)  # nor a failure


def test_matrices_of_several_families_get_a_family_column():
    tex = render_fragment(rows(("cpu", "hopper")), meta=META)
    assert "Family & Method & TP & Budget" in tex
    assert "cpu & ddtree & 1 & 16" in tex and "hopper & ddtree & 1 & 16" in tex
    code = render_fragment(rows() + [row("ar", 1, None, 1.0, workload="code")], meta=META)
    assert code.count("\\begin{tabular}") == 2 and "workload code" in code


def test_write_report_writes_both_tex_files_and_vector_plots(tmp_path):
    pytest.importorskip("matplotlib")
    files = write_report(tmp_path / "report", rows(), meta=META)
    assert files.standalone.name == "report-standalone.tex"
    fragment, standalone = files.latex.read_text(), files.standalone.read_text()
    assert "\\includegraphics[width=\\linewidth]{plots/accept_length.pdf}" in fragment
    assert standalone.startswith("\\documentclass") and fragment in standalone
    assert "![tokens_per_s](plots/tokens_per_s.png)" in files.markdown.read_text()


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (Debian: apt-get install "
                           "texlive-latex-recommended)")
def test_the_standalone_report_compiles_with_pdflatex(tmp_path):
    pytest.importorskip("matplotlib")
    files = write_report(tmp_path, rows(("cpu", "hopper")) + [row("ar", 1, None, 1.0, workload="a_b%")],
                         meta=META)
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           files.standalone.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "report-standalone.pdf").read_bytes()[:5] == b"%PDF-"


def workloads(count):
    return [row(method, 1, budget, tok_s, workload=f"w{number:03d}")
            for number in range(count) for method, budget, tok_s in (("ar", None, 300.0), ("ddtree", 16, 900.0))]


def pending_floats(tex):
    """The most floats LaTeX holds unplaced at once reading `tex`, and those still pending at its
    end: tables and figures of [t] with no text between them are placed only by a `\\clearpage`."""
    most = pending = 0
    for line in tex.splitlines():
        if line.startswith(("\\begin{table}[t]", "\\begin{figure}[t]")):
            pending += 1
            most = max(most, pending)
        elif line.strip() == "\\clearpage":
            pending = 0
    return most, pending


def test_a_report_of_many_workloads_flushes_its_floats_before_latex_gives_up():
    """150 workloads made 150 tables and 26 figures of [t] with no text between them: LaTeX stops at
    the 19th float pending ("Too many unprocessed floats"), and report-standalone.tex did not compile."""
    plots = [f"plots/{stem}{'' if page == 1 else f'-{page}'}.pdf"
             for stem in ("tokens_per_s", "accept_length") for page in range(1, 14)]
    tex = render_fragment(workloads(150), plots, meta=META)
    assert tex.count("\\begin{table}[t]") == 150 and tex.count("\\begin{figure}[t]") == 26
    most, left = pending_floats(tex)
    assert most <= 10 and left == 0  # room for the paper's own floats; none left to the text after it
    tables = [line for line in tex.splitlines() if line.startswith("\\label{tab:")]
    assert tables == [f"\\label{{tab:specdec-w{number:03d}}}" for number in range(150)]  # all, in order


def test_a_report_of_a_few_workloads_has_no_page_break():
    """A fragment \\input in a paper breaks no page where LaTeX can place its floats itself."""
    plots = ["plots/tokens_per_s.pdf", "plots/accept_length.pdf"]
    tex = render_fragment(workloads(4), plots, meta=META)
    assert "\\clearpage" not in tex and pending_floats(tex) == (6, 6)


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (Debian: apt-get install "
                           "texlive-latex-recommended)")
def test_the_standalone_report_of_many_workloads_compiles_with_pdflatex(tmp_path):
    files = write_report(tmp_path, workloads(150), meta=META, plots=False)
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           files.standalone.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "report-standalone.pdf").read_bytes()[:5] == b"%PDF-"


def test_two_tests_of_one_configuration_each_have_their_own_reference_and_their_name():
    """Their AR rows read 0.85x and 1.00x (one test's AR divided by the other's), and nothing told
    the two tests' rows apart."""
    from dataclasses import replace

    from pytest_specdec.latex import render_fragment, speedups
    from pytest_specdec.report import format_table

    def of(test, r):
        return replace(r, test_id=r.test_id.replace("test_generation", test))

    rows = [of("test_a", row("ar", 1, None, 400.0)), of("test_a", row("ddtree", 1, 8, 800.0)),
            of("test_b", row("ar", 1, None, 500.0)), of("test_b", row("ddtree", 1, 8, 750.0))]
    assert sorted(speedups(rows).values()) == [1.0, 1.0, 1.5, 2.0]
    fragment = render_fragment(rows)
    assert "Test & Method" in fragment and "test\\_a & ar" in fragment
    table = format_table(rows)
    assert "ar-tp1 (test_a)" in table and "ddtree-tp1-b8 (test_b)" in table


def test_repeats_of_one_configuration_are_told_apart_and_each_has_its_own_reference():
    """pytest-repeat's --count 2: four rows that read alike, speedups of one repeat's DDTree over
    the other repeat's AR."""
    from dataclasses import replace

    def repeat(r, i):
        return replace(r, test_id=r.test_id[:-1] + f"-{i}-2]")

    rows = [repeat(row("ar", 1, None, 400.0), 1), repeat(row("ddtree", 1, 8, 800.0), 1),
            repeat(row("ar", 1, None, 500.0), 2), repeat(row("ddtree", 1, 8, 750.0), 2)]
    assert sorted(speedups(rows).values()) == [1.0, 1.0, 1.5, 2.0]
    fragment = render_fragment(rows)
    assert "Method & TP & Budget & Variant & tokens/s" in fragment
    assert "\\begin{tabular}{lrrlrrrrr}" in fragment
    assert "ddtree & 1 & 8 & 1-2 & \\textbf{800.0} & \\textbf{2.00$\\times$}" in fragment
    assert "ddtree & 1 & 8 & 2-2 & 750.0 & 1.50$\\times$" in fragment
    assert "Variant" not in render_fragment(rows[:2])  # no repeats: no column
