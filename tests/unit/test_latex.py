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


@pytest.mark.parametrize("results", [[], rows()[-1:]], ids=["no-rows", "only-a-failure"])
def test_the_standalone_report_of_no_results_says_so(tmp_path, results):
    """A run that measured nothing had a document body of comments alone, which LaTeX sets on no
    page: pdflatex said "No pages of output" and wrote no PDF. The document now says why it is empty;
    report.tex, for a paper's \\input, stays free of text."""
    files = write_report(tmp_path, results, plots=False)
    body = files.standalone.read_text().split("\\begin{document}\n", 1)[1].split("\\end{document}", 1)[0]
    assert [line for line in body.splitlines() if line.strip() and not line.startswith("%")] == [
        "This run measured no results; report.md says what ran."]
    fragment = files.latex.read_text()
    assert all(not line.strip() or line.startswith("%") for line in fragment.splitlines())


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (Debian: apt-get install "
                           "texlive-latex-recommended)")
def test_the_standalone_report_of_no_results_compiles_to_a_page(tmp_path):
    files = write_report(tmp_path, [], plots=False)
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


def matrix(families, tps=(1, 4, 8), workload="chat"):
    """A workload's rows of the README's matrices: six configurations a TP in each family."""
    return [row(method, tp, budget, 100.0 + tp + (budget or 0), 2.0 + (budget or 0) / 64, family=family,
                workload=workload)
            for family in families for tp in tps
            for method, budget in (("ar", None), ("dflash", None), ("ddtree", 8), ("ddtree", 16),
                                   ("ddtree", 32), ("ddtree", 64))]


def floats_rows(tex):
    """Each table float's caption and its rows (the lines between \\midrule and \\bottomrule)."""
    out = []
    for part in tex.split("\\begin{table}[t]")[1:]:
        lines = part.split("\\end{table}")[0].splitlines()
        caption = next(line for line in lines if line.startswith("\\caption{"))
        body = lines[lines.index("\\midrule") + 1:lines.index("\\bottomrule")]
        out.append((caption, body))
    return out


def test_a_workload_of_more_rows_than_a_page_holds_goes_on_in_further_tables():
    """Four families made one table of 72 rows: it ran 307pt past the page's bottom, its last rows
    cut off. Now each float holds at most ROWS_PER_TABLE rows, every row once, in order."""
    from pytest_specdec.latex import ROWS_PER_TABLE

    four = render_fragment(matrix(("fa", "fb", "fc", "fd")), meta=META)
    floats = floats_rows(four)
    assert [len(body) for _, body in floats] == [18, 18, 18, 18]  # a family a table, none cut
    assert all(len(body) <= ROWS_PER_TABLE for _, body in floats)
    shown = [line for _, body in floats for line in body]
    assert len(shown) == 72 and len(set(shown)) == 72
    assert [line.split(" & ")[0] for line in shown] == ["fa"] * 18 + ["fb"] * 18 + ["fc"] * 18 + ["fd"] * 18
    assert "workload chat (on NVIDIA H200" in floats[0][0]  # the first keeps its caption and label
    assert [caption for caption, _ in floats[1:]] == [
        "\\caption{Speculative decoding results, workload chat (continued).}"] * 3
    labels = [line for line in four.splitlines() if line.startswith("\\label{tab:")]
    assert labels == ["\\label{tab:specdec-chat}", "\\label{tab:specdec-chat:2}",
                      "\\label{tab:specdec-chat:3}", "\\label{tab:specdec-chat:4}"]
    assert four.count("\\textbf{172.0}") == 4  # bold: the best of the whole workload, each family's TP 8
    one = render_fragment(matrix(("fa",)) + matrix(("fa",), workload="code"), meta=META)
    assert [len(body) for _, body in floats_rows(one)] == [18, 18]  # a family: a table a workload


def test_a_family_of_more_rows_than_a_page_holds_is_cut_between_tps():
    from pytest_specdec.latex import pages

    rows = matrix(("fa",), tps=(1, 2, 4, 8, 16))  # 30 rows, sorted as a table sorts them
    pieces = pages(rows, 24)
    assert [len(p) for p in pieces] == [24, 6] and [r for p in pieces for r in p] == rows
    assert {r.tp for r in pieces[0]} == {1, 2, 4, 8} and {r.tp for r in pieces[1]} == {16}
    small = matrix(("fa", "fb"), tps=(1,))  # two families of 6 rows share a table
    assert [len(p) for p in pages(small, 24)] == [12]
    one_tp = [row("ddtree", 1, budget, 100.0 + budget) for budget in range(1, 31)]
    assert [len(p) for p in pages(one_tp, 24)] == [15, 15]  # even parts, not 24 and 6


def test_a_table_wider_than_the_text_is_scaled_to_it_and_only_such_a_table():
    """With the speedup column a table ran 42pt past the right margin in article, with a family
    column 82pt. Each tabular is now measured in a box: scaled to \\linewidth where wider, set
    as it is otherwise."""
    tex = render_fragment(matrix(("fa", "fb")), meta=META)
    assert tex.count("\\sbox0{\\begin{tabular}") == tex.count("\\begin{table}[t]") == 2
    assert tex.count("\\end{tabular}}%\n\\ifdim\\wd0>\\linewidth\\resizebox{\\linewidth}{!}{\\usebox0}"
                     "\\else\\usebox0\\fi\n\\end{table}") == 2


def pdflatex_warnings(folder, name="report-standalone.tex"):
    """pdflatex's run on `name`: a box past the margins or the page, or a float too large."""
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", name], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    log = (folder / name).with_suffix(".log").read_text(errors="replace")
    return [line for line in log.splitlines()
            if line.startswith(("Overfull \\hbox", "Overfull \\vbox")) or "Float too large" in line]


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="pdflatex is not installed (Debian: apt-get install "
                           "texlive-latex-recommended)")
def test_every_table_fits_the_page_in_pdflatex(tmp_path):
    """A workload of four families ran 307pt past the page's bottom and 82pt past its right margin;
    one family's table with its speedup column 42pt past the margin."""
    for name, families in (("four", ("fa", "fb", "fc", "fd")), ("one", ("fa",))):
        files = write_report(tmp_path / name, matrix(families) + matrix(families, workload="code"),
                             meta=META, plots=False)
        assert pdflatex_warnings(files.standalone.parent) == [], name


def test_labels_are_unique_within_a_document_and_ascii():
    """Workloads `a b` and `a-b` both got `\\label{tab:specdec-a-b}` (LaTeX: "Label multiply
    defined", a \\ref to either found one), and `über` passed `ü` into its label, which packages
    reading labels (hyperref, babel's shorthands) may not take. A name its slug spells, alone with
    that slug, keeps it; any other gets a short hash of the name beside it."""
    import re

    names = ["a b", "a-b", "über", "ëber", "chat", "c$d"]
    tex = render_fragment([row("ar", 1, None, 300.0, workload=name) for name in names],
                          ["plots/tokens_per_s.pdf", "plots/a b.pdf", "plots/a_b.pdf"], meta=META)
    tables = re.findall(r"\\label\{tab:specdec-([^}]*)\}", tex)
    figures = re.findall(r"\\label\{fig:specdec-([^}]*)\}", tex)
    assert len(tables) == len(set(tables)) == len(names) and len(figures) == len(set(figures)) == 3
    assert all(re.fullmatch(r"[a-z0-9-]+", label) for label in tables + figures)
    assert {"a-b", "chat", "tokens-per-s"} <= set(tables + figures)  # names their slugs spell, unchanged
    assert re.fullmatch(r"a-b-[0-9a-f]{8}", tables[sorted(names).index("a b")])  # tables go by name
    again = render_fragment([row("ar", 1, None, 300.0, workload=name) for name in names], meta=META)
    assert re.findall(r"\\label\{tab:specdec-([^}]*)\}", again) == tables  # stable from run to run


def test_a_row_measured_on_a_shared_server_says_so():
    from dataclasses import replace

    shown = [replace(r, verdict="shared") if r.budget == 16 else r for r in rows()]
    lines = [line for line in render_fragment(shown).splitlines() if line.startswith("ddtree")]
    assert [line.split(" & ")[0] for line in lines] == ["ddtree", "ddtree (shared)"]
