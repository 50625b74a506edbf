"""Plots people can read: one series per (family, method, TP), spread shown, axes from 0."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from report_support import row

pytest.importorskip("matplotlib")

from pytest_specdec.plots import PLOTTED, draw, plot_rows  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The tests take plot_pool as `import pytest_specdec.plot_pool as plot_pool`, the module the report
# imports: a pytester test before them drops a module it first imported from sys.modules, and
# `from pytest_specdec import plot_pool` then patches that stale one while the report imports anew.


def two_families():
    """The same configurations measured from the cpu and the hopper matrices (an H200 run that
    ran both): they must stay two series each, never one zig-zag line."""
    out = []
    for family, scale in (("cpu", 1.0), ("hopper", 3.0)):
        out += [row("ar", 1, None, 300.0 * scale, family=family, spread=9.0),
                row("dflash", 1, None, 650.0 * scale, 2.5, family=family, spread=20.0)]
        out += [row("ddtree", 1, b, (700.0 + 10 * b) * scale, 2.9 + b / 50, family=family,
                    spread=25.0) for b in (8, 16, 32)]
    return out


def test_one_legend_entry_per_family_method_and_tp():
    fig = draw(two_families(), "output_tok_s", "tokens/s")
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert sorted(labels) == sorted(f"{family} {method} TP1" for family in ("cpu", "hopper")
                                    for method in ("ar", "dflash", "ddtree"))
    (ax,) = fig.axes
    series = {c.get_label(): c for c in ax.containers}  # an errorbar's label is its container's
    assert list(series["hopper ddtree TP1"].lines[0].get_xdata()) == [8, 16, 32]
    assert list(series["cpu ddtree TP1"].lines[0].get_ydata()) == [780.0, 860.0, 1020.0]


def test_spread_is_drawn_and_the_axis_starts_at_zero():
    fig = draw(two_families(), "output_tok_s", "tokens/s")
    (ax,) = fig.axes
    assert ax.get_ylim()[0] == 0
    bars = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
    assert len(bars) == 2  # the two ddtree series, over their budgets
    segments = bars[0].lines[2][0].get_segments()
    assert segments[0][1][1] - segments[0][0][1] == pytest.approx(2 * 1.96 * 25.0)
    assert len(ax.collections) >= 4 + 2  # a band for each budget-less line (ar, dflash x 2)


def test_accept_length_has_the_reference_method_as_a_line_at_one():
    fig = draw(two_families(), "accept_length", "accept length")
    (ax,) = fig.axes
    ar = [line for line in ax.lines if line.get_label() == "cpu ar TP1 (1 token per step)"]
    assert len(ar) == 1 and list(ar[0].get_ydata()) == [1.0, 1.0]
    assert list(ar[0].get_xdata()) == [8, 32] and ax.get_ylim()[0] == 0


def test_one_family_needs_no_family_in_labels():
    rows = [r for r in two_families() if r.family == "cpu"]
    labels = [t.get_text() for t in draw(rows, "output_tok_s", "tokens/s").legends[0].get_texts()]
    assert sorted(labels) == ["ar TP1", "ddtree TP1", "dflash TP1"]


def test_plot_rows_writes_png_and_pdf(tmp_path):
    paths = plot_rows(two_families(), tmp_path)
    assert [p.name for p in paths] == ["tokens_per_s.png", "tokens_per_s.pdf",
                                       "accept_length.png", "accept_length.pdf"]
    assert paths[0].read_bytes()[:8] == PNG_MAGIC and paths[1].read_bytes()[:5] == b"%PDF-"


def test_plot_rows_without_budgets_and_empty(tmp_path):
    only_chain = [row("dflash", 1, None, 650.0, 2.5), row("ar", 1, None, 300.0)]
    assert [p.name for p in plot_rows(only_chain, tmp_path / "a")][::2] == [
        "tokens_per_s.png", "accept_length.png"]
    assert plot_rows([], tmp_path / "b") == []


def test_the_same_rows_draw_the_same_files(tmp_path, monkeypatch):
    """The PDFs carried the moment they were written, so a merge run again (or a report kept in
    git) changed every plot though nothing it shows had."""
    rows = [row("ar", 1, None, 300.0), row("ddtree", 1, 8, 700.0, 2.9)]
    drawn = []
    for moment in ("1000000000", "2000000000"):  # matplotlib dates a PDF by it where set
        monkeypatch.setenv("SOURCE_DATE_EPOCH", moment)
        drawn.append({p.name: p.read_bytes() for p in plot_rows(rows, tmp_path / moment)})
    assert sorted(drawn[0]) == ["accept_length.pdf", "accept_length.png", "tokens_per_s.pdf", "tokens_per_s.png"]
    assert drawn[0] == drawn[1]


def many_workloads(count):
    return [row(method, 1, budget, 100.0 + i, 2.0 if method != "ar" else None, workload=f"w{i:03d}")
            for i in range(count) for method, budget in (("ar", None), ("ddtree", 8), ("ddtree", 16))]


@pytest.fixture
def four_pages(monkeypatch):
    """Rows of four pages (two a plot) of one panel each: the pool's tests need several pages,
    not pages of 12 panels (seconds each to draw, twice over on a loaded CI host)."""
    import pytest_specdec.plots as plots

    monkeypatch.setattr(plots, "PANELS_PER_PAGE", 1)  # pages are cut here; a worker draws what it is sent
    return many_workloads(2)


def test_many_workloads_go_on_pages_of_a_bounded_number_of_panels(tmp_path, monkeypatch):
    """150 workloads drew one figure of 150 panels in a row per plot: unreadable, and matplotlib's
    constrained layout of it took minutes. Each page now holds at most 12, every workload once,
    in order."""
    import pytest_specdec.plots as plots
    import pytest_specdec.plot_pool as plot_pool

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 1)  # drawn here, where the spy sees them
    drawn = []
    original = plots.draw

    def spy(*args, **kwargs):
        fig = original(*args, **kwargs)
        drawn.append([ax.get_title() for ax in fig.axes])
        return fig

    monkeypatch.setattr(plots, "draw", spy)
    # the pages' panels are the point, not their pixels: rendering 60 panels took most of the test
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.backends.backend_pdf import FigureCanvasPdf

    monkeypatch.setattr(FigureCanvasAgg, "print_png", lambda self, path, **kw: Path(path).write_bytes(b""))
    monkeypatch.setattr(FigureCanvasPdf, "print_pdf", lambda self, path, **kw: Path(path).write_bytes(b""))
    paths = plot_rows(many_workloads(30), tmp_path)
    assert [p.name for p in paths][::2] == ["tokens_per_s.png", "tokens_per_s-2.png", "tokens_per_s-3.png",
                                           "accept_length.png", "accept_length-2.png", "accept_length-3.png"]
    assert [len(titles) for titles in drawn] == [12, 12, 6] * 2
    assert [t for titles in drawn[:3] for t in titles] == [f"w{i:03d}" for i in range(30)]


def test_a_page_wraps_its_panels_and_a_few_workloads_stay_in_one_row():
    fig = draw(many_workloads(30), "output_tok_s", "tokens/s", [f"w{i:03d}" for i in range(5)])
    assert len(fig.axes) == 5 and tuple(fig.get_size_inches()) == (4.8 * 4 + 2.2, 3.6 * 2)
    fig = draw(many_workloads(3), "output_tok_s", "tokens/s")
    assert len(fig.axes) == 3 and tuple(fig.get_size_inches()) == (4.8 * 3 + 2.2, 3.6)
    assert len({ax.get_position().y0 for ax in fig.axes}) == 1


def test_page_names_read_back():
    from pytest_specdec.plots import page_name, page_of

    assert [page_name("tokens_per_s", n) for n in (1, 2, 10)] == ["tokens_per_s", "tokens_per_s-2",
                                                                  "tokens_per_s-10"]
    assert [page_of(name) for name in ("accept_length", "accept_length-3", "accept_length-1",
                                       "accept_length-03", "accept_length-x", "other-2")] == [
        ("accept_length", 1), ("accept_length", 3), None, None, None, None]


def test_a_page_is_drawn_once_for_each_file_into_the_bytes_savefig_writes(tmp_path, monkeypatch):
    """savefig drew each figure twice with its constrained layout on (once to lay it out, once
    into the file): four draws a page, most of a report's time. Each file now takes one draw,
    and its bytes are those savefig writes."""
    from matplotlib.figure import Figure

    rows = many_workloads(3)
    expected = {}
    for metric, label, stem, _ in PLOTTED:
        fig = draw(rows, metric, label)
        fig.savefig(tmp_path / f"{stem}.png", dpi=150)
        fig.savefig(tmp_path / f"{stem}.pdf", dpi=150, metadata={"CreationDate": None})
        expected.update({f"{stem}{suffix}": (tmp_path / f"{stem}{suffix}").read_bytes()
                         for suffix in (".png", ".pdf")})
    draws = []
    original = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: draws.append(1) or original(self, renderer))
    paths = plot_rows(rows, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in paths} == expected
    assert len(draws) == len(paths)


def test_a_long_drawing_tells_how_far_it_is(tmp_path, monkeypatch, four_pages):
    """A run of many workloads spent minutes drawing plots after its last test with nothing on
    the terminal. A plot of further pages now says how many pages there are, and each one drawn;
    a report of one page a plot says nothing, as before."""
    import pytest_specdec.plot_pool as plot_pool

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 1)  # drawn here: the pool has its own test
    heard = []
    plot_rows(four_pages, tmp_path / "long", lambda done, total: heard.append((done, total)))
    assert heard == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    heard.clear()
    plot_rows(many_workloads(1), tmp_path / "short", lambda done, total: heard.append((done, total)))
    assert heard == []


def test_worker_processes_draw_the_bytes_drawn_here(tmp_path, monkeypatch, four_pages):
    """Pages drawn in worker processes (a host with cores to spare) are the files this process
    draws; a worker that cannot start leaves its pages to this process, and the report is whole."""
    import matplotlib

    import pytest_specdec.plot_pool as plot_pool

    rows = four_pages
    monkeypatch.setitem(matplotlib.rcParams, "lines.linewidth", 3.0)  # as a conftest may set it: workers follow
    monkeypatch.setattr(plot_pool, "workers", lambda pages: 1)
    here = {p.name: p.read_bytes() for p in plot_rows(rows, tmp_path / "here")}
    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    started = []
    original = plot_pool.subprocess.Popen
    monkeypatch.setattr(plot_pool.subprocess, "Popen", lambda *a, **k: started.append(1) or original(*a, **k))
    heard = []
    paths = plot_rows(rows, tmp_path / "pool", lambda done, total: heard.append((done, total)))
    assert started == [1, 1] and heard == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert [p.name for p in paths] == list(here) and {p.name: p.read_bytes() for p in paths} == here
    monkeypatch.setattr(plot_pool, "BOOT", "raise SystemExit('this interpreter cannot draw')")
    with pytest.warns(UserWarning, match=r"plot worker\(s\) failed.*this interpreter cannot draw"):
        paths = plot_rows(rows, tmp_path / "failed")  # silent before: the cause of a slow report hidden
    assert {p.name: p.read_bytes() for p in paths} == here


def test_a_process_groups_sigterm_or_sighup_leaves_the_workers_drawing(tmp_path, monkeypatch, four_pages):
    """A SIGTERM or SIGHUP sent to the run's process group (a CI runner's cancel, `kill -TERM -PGID`)
    reached the workers too, while the run, which goes on writing its ending after either, still
    needed them: each died mid-page ('plot worker(s) failed ... EOFError: Ran out of input') and its
    pages were drawn in the run's process instead. The workers now ignore both."""
    import pytest_specdec.plot_pool as plot_pool

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    original = plot_pool.subprocess.Popen
    signalled = []

    def popen(*a, **k):  # each worker signalled as soon as it exists, as the group's signal finds it
        worker = original(*a, **k)
        signalled.append((signal.SIGTERM, signal.SIGHUP)[len(signalled) % 2])
        os.kill(worker.pid, signalled[-1])
        return worker

    monkeypatch.setattr(plot_pool.subprocess, "Popen", popen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed worker's warning fails the test
        paths = plot_rows(four_pages, tmp_path)
    assert signalled == [signal.SIGTERM, signal.SIGHUP] and len(paths) == 8


def test_settings_no_pickle_takes_leave_the_pages_to_this_process(tmp_path, monkeypatch, four_pages):
    """A matplotlib setting no pickle takes (a conftest's own object) raised out of the report."""
    import pytest_specdec.plot_pool as plot_pool

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    monkeypatch.setattr(plot_pool, "settings", lambda: {"custom": lambda: None})
    with pytest.warns(UserWarning, match="none started: the rows or matplotlib's settings cannot be sent"):
        assert len(plot_rows(four_pages, tmp_path)) == 8


def test_an_interrupted_drawing_leaves_no_worker_running(tmp_path, monkeypatch):
    """A Ctrl-C (or the SIGTERM the plugin turns into one) while worker processes drew pages left
    them drawing on after the run had ended; they are now killed before the interrupt goes on."""
    import pytest_specdec.plot_pool as plot_pool

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    monkeypatch.setattr(plot_pool, "BOOT", "import time; time.sleep(60)")  # a worker busy on a long page
    started = []
    original = plot_pool.subprocess.Popen
    monkeypatch.setattr(plot_pool.subprocess, "Popen", lambda *a, **k: started.append(original(*a, **k)) or started[-1])

    class Interrupted(threading.Thread):
        def join(self, timeout=None):
            deadline = time.monotonic() + 30
            while len(started) < 2 and time.monotonic() < deadline:  # both workers running
                time.sleep(0.01)
            raise KeyboardInterrupt

    monkeypatch.setattr(plot_pool, "threading", SimpleNamespace(Thread=Interrupted, Lock=threading.Lock,
                                                              Event=threading.Event, Timer=threading.Timer))
    try:
        with pytest.raises(KeyboardInterrupt):
            plot_rows(many_workloads(13), tmp_path)
        assert len(started) == 2 and all(worker.poll() is not None for worker in started)
    finally:
        for worker in started:
            worker.kill()
            worker.wait()


def test_a_worker_starting_as_the_drawing_is_interrupted_is_killed_too(tmp_path, monkeypatch):
    """A thread that started its worker just after the interrupt killed the running ones left it
    running, fed the pages still queued: the kill had not seen it. It now kills its worker itself."""
    import pytest_specdec.plot_pool as plot_pool

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    monkeypatch.setattr(plot_pool, "BOOT", "import time; time.sleep(60)")  # a worker busy on a long page
    killed = threading.Event()
    original_kill = plot_pool._kill
    monkeypatch.setattr(plot_pool, "_kill", lambda *a: original_kill(*a) or killed.set())
    started = []
    original = plot_pool.subprocess.Popen

    def late_popen(*a, **k):
        killed.wait(30)  # each worker starts only once the interrupt has killed the others
        started.append(original(*a, **k))
        return started[-1]

    monkeypatch.setattr(plot_pool.subprocess, "Popen", late_popen)
    threads = []

    class Interrupted(threading.Thread):
        def start(self):
            threads.append(self)
            super().start()

        def join(self, timeout=None):
            if threading.current_thread() is threading.main_thread():
                raise KeyboardInterrupt
            super().join(timeout)

    monkeypatch.setattr(plot_pool, "threading", SimpleNamespace(Thread=Interrupted, Lock=threading.Lock,
                                                              Event=threading.Event, Timer=threading.Timer))
    try:
        with pytest.raises(KeyboardInterrupt):
            plot_rows(many_workloads(13), tmp_path)
        for thread in threads:
            threading.Thread.join(thread, timeout=20)
        assert len(started) == 2 and all(worker.poll() is not None for worker in started)
    finally:
        for worker in started:
            worker.kill()
            worker.wait()


#: Put before plot_pool.BOOT: the worker's import of matplotlib prints, as a library may at import.
LOUD_IMPORT = ("import sys\n"
               "class Loud:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'matplotlib':\n"
               "            print('\\nmatplotlib imported', flush=True)\n"
               "sys.meta_path.insert(0, Loud())\n")


def test_a_print_as_a_worker_imports_does_not_reach_its_answers(tmp_path, monkeypatch, four_pages):
    """A worker set its stdout (its answers' stream) aside only after importing matplotlib and the
    plots: a print as they were imported went into the answers, the parent read garbage and drew
    every page itself. The stream is now set aside before any import."""
    import pytest_specdec.plot_pool as plot_pool
    from pytest_specdec import plots

    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    monkeypatch.setattr(plot_pool, "BOOT", LOUD_IMPORT + plot_pool.BOOT)
    here = []
    original = plots.save_page
    monkeypatch.setattr(plots, "save_page", lambda rows, page, out_dir: here.append(page.name) or
                        original(rows, page, out_dir))
    paths = plot_rows(four_pages, tmp_path)
    assert here == [] and len(paths) == 8


def test_a_worker_hung_on_a_page_is_killed_and_the_report_lands_without_that_page(tmp_path, monkeypatch,
                                                                                 four_pages):
    """A worker that hung on a page (inside matplotlib, say) held the run's end forever: nothing
    timed a page. It is now killed after plot_pool.PAGE_TIMEOUT_S, the page named in a warning,
    and the other pages and the rest of the report are written."""
    import pytest_specdec.plot_pool as plot_pool
    from pytest_specdec.report import write_report

    marks = tmp_path / "hung"  # a worker hung on its page leaves its pid here
    marks.mkdir()
    hang = ("import os, time, pytest_specdec.plots as plots\n"
            "draw = plots.save_page\n"
            "def save_page(rows, page, out):\n"
            "    if page.name != 'tokens_per_s-2':\n"
            "        return draw(rows, page, out)\n"
            f"    open(os.path.join({str(marks)!r}, str(os.getpid())), 'w').close()\n"
            "    time.sleep(3600)\n"
            "plots.save_page = save_page\n")
    line = "from pytest_specdec.plot_worker import serve\n"
    monkeypatch.setattr(plot_pool, "BOOT", plot_pool.BOOT.replace(line, hang + line))
    monkeypatch.setattr(plot_pool, "PAGE_TIMEOUT_S", 30.0, raising=False)  # pages take a few seconds here
    monkeypatch.setattr(plot_pool, "workers", lambda pages: 2)
    started = []
    serving: dict = {}  # the thread serving a worker -> that worker
    original = plot_pool.subprocess.Popen

    def popen(*a, **k):
        started.append(original(*a, **k))
        serving[threading.current_thread()] = started[-1]
        return started[-1]

    monkeypatch.setattr(plot_pool.subprocess, "Popen", popen)
    intervals = []

    class PageTimer(threading.Timer):
        """The page's timer, expiring at once where its worker marked itself hung: the test does
        not wait PAGE_TIMEOUT_S out, and a page still being drawn keeps all of it."""

        def __init__(self, interval, function, *args, **kwargs):
            super().__init__(interval, function, *args, **kwargs)
            self.thread = threading.current_thread()  # the thread that started this page's worker
            intervals.append(interval)

        def run(self):
            deadline = time.monotonic() + self.interval
            while not self.finished.wait(0.05):
                worker = serving.get(self.thread)
                if (worker is not None and (marks / str(worker.pid)).exists()) or time.monotonic() > deadline:
                    self.function(*self.args, **self.kwargs)
                    return

    monkeypatch.setattr(plot_pool, "threading", SimpleNamespace(Thread=threading.Thread, Lock=threading.Lock,
                                                              Event=threading.Event, Timer=PageTimer))
    box: dict = {}
    drawing = threading.Thread(target=lambda: box.update(files=write_report(tmp_path / "r", four_pages)),
                               daemon=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawing.start()
        drawing.join(300)  # the old code never returned
    try:
        assert not drawing.is_alive()
        import sys

        assert not [w for w in caught if "plot worker" in str(w.message)], [str(w.message) for w in caught]
        assert sys.modules["pytest_specdec.plot_pool"] is plot_pool is sys.modules["pytest_specdec"].plot_pool
        assert len(started) >= 2, f"{len(started)} workers started"
        assert len(list(marks.iterdir())) == 1 and set(intervals) == {30.0}  # timed by PAGE_TIMEOUT_S
        files = box["files"]
        assert [p.name for p in files.plots] == [f"{stem}.{ext}" for stem in ("tokens_per_s", "accept_length",
                                                                             "accept_length-2")
                                                 for ext in ("png", "pdf")]
        assert files.plot_error is not None and "tokens_per_s-2" in files.plot_error
        assert files.plot_error in files.markdown.read_text() and all(p.exists() for p in files.plots)
        assert all(worker.poll() is not None for worker in started)
    finally:
        for worker in started:
            worker.kill()
            worker.wait()


def test_names_with_dollar_signs_are_drawn_as_written_not_as_mathtext(tmp_path):
    """matplotlib reads text between two `$` as mathtext: a workload named `cost $\\frac{a}{b$`
    stopped the run's end with a ParseSyntaxException traceback and no report at all, and one
    named `$x$` read as an italic x. Workload and family names are drawn as written."""
    from matplotlib.cbook import is_math_text

    rows = [row("ar", 1, None, 300.0, workload="cost $\\frac{a}{b$", family="$fam$"),
            row("ddtree", 1, 8, 700.0, 3.0, workload="$x$", family="cpu")]
    assert [p.name for p in plot_rows(rows, tmp_path)][::2] == ["tokens_per_s.png", "accept_length.png"]
    fig = draw(rows, "output_tok_s", "tokens/s")
    texts = [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(texts) == 4 and not any(is_math_text(t) for t in texts)


@pytest.mark.parametrize("budgets", [(8, 12, 15, 16, 32, 64),
                                     (2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15, 16, 20, 24, 28, 32, 40, 48, 56, 64)])
def test_close_budgets_keep_their_ticks_but_never_print_labels_over_each_other(budgets):
    # the configured matrix's 15 and 16, or a fine sweep, on a panel of a many-workload figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [row("ar", 1, None, 300.0, workload=f"w{w}") for w in range(8)]
    rows += [row("ddtree", 1, b, 700.0 + b, 2.5, workload=f"w{w}") for b in budgets for w in range(8)]
    fig = draw(rows, "output_tok_s", "tokens/s")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    assert list(ax.get_xticks()) == list(budgets)
    shown = [t.get_window_extent(canvas.get_renderer()) for t in ax.get_xticklabels() if t.get_text()]
    assert [t.get_text() for t in ax.get_xticklabels()][0] == str(budgets[0])
    assert all(left.x1 < right.x0 for left, right in zip(shown, shown[1:]))


def test_a_point_measured_on_a_shared_server_says_so():
    from dataclasses import replace

    rows = [replace(r, verdict="shared") if r.method == "ddtree" and r.budget == 16 or r.method == "ar" else r
            for r in two_families() if r.family == "cpu"]
    (ax,) = draw(rows, "output_tok_s", "tokens/s").axes
    marks = [t for t in ax.texts if t.get_text() == "shared"]
    assert sorted(m.xy for m in marks) == [(8, 300.0), (16, 860.0)]  # ar's line starts at the first budget
