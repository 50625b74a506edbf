"""`python -m pytest_specdec merge --out DIR SHARD_DIR...`: the shards of one run, merged.

Writes into DIR the merged results.json, report.md, report.tex and plots (the report writers
of a run), junit.xml (JUnit-compatible), durations.json (this merge's durations alone, replacing
an earlier merge's), and with --save-baseline the baseline file of each shard's hardware key and
the durations added to the baseline folder's (for the next run's balance). The files of DIR are
written into a hidden folder inside it and moved in together once all are written (staging.py):
an interrupted merge leaves the earlier merge's files, or part of its own, never some of each.
Exit status: 0 when every shard finished and passed, 1 when a shard's gate failed, the shards ran
under different gates, a shard is missing or did not finish (the report is still written and
says what), 2 for shards that do not belong together, a project setting a run refuses too (its
specdec_summary_rows, for --summary-rows' default), an output that cannot be written, a baseline or durations file of the
baseline folder that is broken or a figure no baseline can hold (checked before anything is
written, so nothing is), a save outside the project (the default --baseline-dir lacks the file the
shards compared with), or a baseline folder file's lock held past --lock-timeout.
A SIGTERM or SIGHUP (a CI runner's cancel, a batch system's time limit, a hangup) ends a merge as
Ctrl-C does, with one line saying what it left and 128 + the signal's number (143, 129; Ctrl-C's
130): by default it killed the merge without a word, a baseline file's temporary copy left behind.
A second one ends it at once.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

from .baselines import LOCK_TIMEOUT_S
from .errors import SpecdecUsageError


def _seconds(text: str) -> float:
    """A positive number of seconds (argparse says what is wrong with anything else)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _rows(text: str) -> int:
    """A number of rows, 0 or more, as --specdec-summary-rows takes it (argparse says what is wrong)."""
    from .options import _count

    try:
        return _count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    from .options import OPTIONS_BY_NAME

    rows = OPTIONS_BY_NAME["summary_rows"]
    parser = argparse.ArgumentParser(prog="python -m pytest_specdec",
                                     description="pytest-specdec tools")
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser(
        "merge", help="merge the shard folders of a sharded run (--specdec-shard=K/N "
                      "--specdec-report=SHARD_DIR) into one report",
        description="Merge the shard folders of a sharded run (each shard's --specdec-report "
                    "folder) into one results.json, report, JUnit summary and, with "
                    "--save-baseline, baseline files.")
    merge.add_argument("shard_dirs", nargs="+", metavar="SHARD_DIR",
                       help="a shard's --specdec-report folder (its shard.json and journal)")
    merge.add_argument("--out", required=True, metavar="DIR", help="folder for the merged report")
    merge.add_argument("--save-baseline", action="store_true",
                       help="merge the figures into the baseline file of each shard's hardware "
                            "key, and the durations into durations.json beside them")
    # None until parsed: a folder given is taken as meant, the default is checked (merge.baseline_elsewhere)
    merge.add_argument("--baseline-dir", default=None, metavar="DIR",
                       help=f"folder of the baseline files (default: {DEFAULT_BASELINE_DIR})")
    merge.add_argument("--lock-timeout", type=_seconds, default=LOCK_TIMEOUT_S, metavar="S",
                       help="seconds --save-baseline waits for a baseline folder file's lock while "
                            f"another run holds it, before it fails (default: {LOCK_TIMEOUT_S:g})")
    merge.add_argument("--no-plots", action="store_true", help="write no plots")
    # None until parsed: not given, the project's setting holds, as in its runs (merge_settings)
    merge.add_argument("--summary-rows", type=_rows, default=None, metavar="N",
                       help=f"the most rows the printed table shows, as a run's {rows.cli}: past N, the "
                            f"rows of tests that passed ok beyond N fold into one line (the merged "
                            f"report.md and results.json keep every row); 0 shows every row "
                            f"(default: the project's {rows.ini} or [tool.specdec] {rows.name}, as a "
                            f"run's, else {rows.default})")
    return parser


#: --baseline-dir's default, the project's as a run's --specdec-baseline-dir is: the merge runs there
DEFAULT_BASELINE_DIR = "baselines"


def merge_command(args: argparse.Namespace, out=None) -> int:
    out = sys.stdout if out is None else out  # the stdout of the call, not of the import (a test's capture)
    from . import baselines, durations, junit, merge, plots, report, staging
    from .relpaths import relative
    from .shard import DURATIONS_FILE
    from .write_failure import unwritable

    from .merge_settings import project_value

    limit = project_value("summary_rows", args.summary_rows, Path.cwd())  # a bad one stops it, as a run stops on it
    target = Path(args.out)
    if target.exists() and not target.is_dir():
        raise SpecdecUsageError(f"--out {target} is a file; name a folder for the merged report "
                                f"(it is created where missing)")
    for shard in args.shard_dirs:
        # realpath: Path.resolve raised RuntimeError on a link loop before Python 3.13
        if os.path.realpath(target) == os.path.realpath(shard):  # its report and shard.json are a shard's
            raise SpecdecUsageError(f"--out {target} is the shard folder {shard}: the merged report "
                                    f"would overwrite that shard's own; name another folder")
    # where the lines that name a few of many tests say the rest are: the report this merge writes
    where = f"{target / 'report.md'} and {target / 'results.json'}"
    merged = merge.merge(args.shard_dirs, where)
    _check_targets(args, merged)
    # the merge runs in the project, as its default --baseline-dir says: paths relative to it
    rows = [replace(row, reason=relative(row.reason, Path.cwd())) if row.reason else row
            for row in merged.rows]
    title = merged.title
    # every output staged first, moved in together: --out never holds files of two merges
    try:
        with staging.staged(target, ".merge-") as folder:
            files = report.write_files(folder, rows, meta=merged.meta(), plots=not args.no_plots, title=title,
                                       progress=plots.told(target, lambda line: print(
                                           f"specdec merge: {line}", file=sys.stderr, flush=True)))
            extra = [junit.write(folder / "junit.xml", rows, nodeids=merged.nodeids)]
            if merged.durations():  # else none: an earlier merge's configurations would read as this one's
                durations.write(folder / DURATIONS_FILE, merged.durations())
                extra.append(folder / DURATIONS_FILE)
            files = report.publish(files, folder, target, extra, previous=("junit.xml", DURATIONS_FILE))
    except OSError as exc:  # a full disk, a read-only folder: one line, not a traceback
        raise SpecdecUsageError(f"merged report not written: {unwritable(exc, target, '--out')}; the shard "
                                f"folders are only read: merge again once --out can be written") from None
    written = [files.results_json, files.markdown, files.latex, files.standalone, *files.plots,
               *(target / path.name for path in extra)]
    try:
        report.write_github_summary(rows, title=title, meta=merged.meta())
    except OSError as exc:  # the CI runner's variable, not the user's input: the merge stands, as a run does
        print(f"specdec merge: warning: GITHUB_STEP_SUMMARY not written: "
              f"{exc.filename or '$GITHUB_STEP_SUMMARY'}: {exc.strerror or exc}", file=sys.stderr)
    print(report.format_table(rows, limit=limit, every_row=f"every row is in {where}"), file=out)
    for line in merge.not_measured(merged):
        print(f"specdec merge: not measured: {line}", file=out)
    unrecorded = merge.unrecorded_gate(merged)
    if unrecorded:  # as one run's summary says it; only a merge of every shard can know it
        print(f"specdec merge: {unrecorded}", file=out)
    if not args.save_baseline:
        _small_samples(merged, out, where=where)
    else:
        from .baselines import LockTimeout

        def announce(text: str) -> None:
            print(f"specdec merge: {text}", file=sys.stderr, flush=True)

        lock = {"timeout": args.lock_timeout, "setting": "--lock-timeout", "announce": announce}
        try:
            saved, saved_files = merge.save_baselines(merged, args.baseline_dir, lock)
        except LockTimeout as exc:
            _small_samples(merged, out, where=where)
            raise SpecdecUsageError(f"{exc}; the figures stay in the shard folders: once the lock is "
                                    f"free, merge again with --save-baseline (a figure saved already "
                                    f"is not pooled twice)") from None
        except OSError as exc:  # the report is written; each baseline folder file is whole, old or new
            _small_samples(merged, out, where=where)
            raise SpecdecUsageError(f"baseline not saved: {unwritable(exc, args.baseline_dir, '--baseline-dir')}; "
                                    f"the merged report is written to --out {target}{_baseline_folder_left(args)}: "
                                    f"merge again with --save-baseline once it can be written") from None
        except SpecdecUsageError:  # a baseline file broken since the merge checked it
            _small_samples(merged, out, where=where)
            raise
        _small_samples(merged, out, saved_files, where)
        for path in saved:
            print(f"specdec merge: saved into {path}", file=out)
        if merged.partial_durations():  # as a run with --specdec-save-baseline says it
            print(f"specdec merge: {durations.not_saved(merged.partial_durations(), 'its shard')}", file=out)
        failed, lossy = merge.left_out(merged)
        shared = merge.shared(merged)
        if failed or lossy or shared:  # as a run with --specdec-save-baseline says it
            print(f"specdec merge: left out of the baseline {baselines.left_out(failed, lossy, '', shared, where)}",
                  file=out)
    if files.plot_error:
        print(f"specdec merge: {files.plot_error}", file=out)
    print(f"specdec merge: {merged.meta()['shards']}: {len(rows)} row(s) written to {target} "
          f"({len(written)} files)", file=out)
    if merge.shared(merged):  # as a run's end counts them
        from .sharing import shared_note

        print(f"specdec merge: {shared_note(merge.shared(merged), '--specdec-allow-shared', where)}", file=out)
    for line in merged.skipped:
        print(f"specdec merge: {line}", file=out)
    for line in merged.notes:
        print(f"specdec merge: {line}", file=out)
    for line in merged.warnings:
        print(f"specdec merge: warning: {line}", file=out)
    for problem in merged.problems:
        print(f"specdec merge: FAILED: {problem}", file=out)
    return 0 if merged.ok else 1


def _small_samples(merged, out, saved: dict | None = None, where: str = "") -> None:
    """The gated figures decided from small samples, as each shard's summary says it, for the
    merged run; `saved`: {hardware key: its baseline file as this merge's save left it}, whose
    pooled runs the line says rather than advise a save this merge made; `where`: the merged
    report, which lists every figure the line names only a few of."""
    from .summary import small_sample_gate

    hardware = {id(result): manifest.hardware_key for result, manifest, _ in merged.results}

    def runs(result, metric: str) -> int | None:
        file = (saved or {}).get(hardware.get(id(result), ""))
        entry = file.get(result.test_id, metric) if file is not None else None
        return entry.runs if entry is not None else None

    small = small_sample_gate((result for result, _, _ in merged.results), "--save-baseline", runs, where)
    if small:
        print(f"specdec merge: {small}", file=out)


def _check_targets(args: argparse.Namespace, merged) -> None:
    """What the merge writes into can take it, before anything is written: a junit.xml that is
    a folder, or a broken durations or baseline file of the baseline folder it merges into,
    stops it with no report half-written (the report folder's durations.json is replaced)."""
    from . import merge
    from .outputs import REPORT_FILES, check_folder, check_report_folder, linked
    from .shard import DURATIONS_FILE

    target = Path(args.out)
    check_report_folder(target, (*REPORT_FILES, "junit.xml", DURATIONS_FILE), "--out")
    if args.save_baseline:
        from .baselines import baseline_path

        check_folder(Path(args.baseline_dir), "baseline folder", "--baseline-dir")
        for key in sorted({m.hardware_key for m in merged.shards}):
            path = baseline_path(args.baseline_dir, key)
            real = linked(path, "--baseline-dir")
            if real.parent != path.parent:  # a save writes where the link points
                check_folder(real.parent, f"folder of the file {path} links to", "--baseline-dir")
    merge.check_targets(merged, args.baseline_dir if args.save_baseline else None)
    if args.save_baseline and not args.baseline_dir_given:
        elsewhere = merge.baseline_elsewhere(merged, args.baseline_dir)
        if elsewhere:
            raise SpecdecUsageError(elsewhere)


#: pytest's options that choose where its settings are read: the merge has none of them (merge_settings.py).
_PYTEST_SETTINGS = ("--config-file", "--rootdir", "--override-ini", "--inifile")


def _misspelt(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A command or option name that is none of the parser's stops with the one it likely
    means: argparse (before 3.14) only says `invalid choice` or `unrecognized arguments`, and
    a missing required option hides a misspelt one altogether."""
    from .suggest import hint

    commands = next(action.choices for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction))
    if not argv or argv[0].startswith("-"):
        return  # -h, or no command: argparse's own message says what to give
    command = argv[0]
    if command not in commands:
        parser.error(f"no command {command!r}: {hint(command, commands)}")
    sub = commands[command]
    from .repeated_flags import repeated, resolved

    known = [name for action in sub._actions for name in action.option_strings if name.startswith("--")]
    words = list(itertools.takewhile(lambda word: word != "--", argv[1:]))
    if any(word == "-h" or resolved(word, known) == "--help" for word in words):
        return  # argparse prints the help before any error of the line (`--he` its --help): so do these checks
    for word in words:  # what follows `--` is positional
        name = word.split("=", 1)[0]
        if name in _PYTEST_SETTINGS or name[:2] in ("-c", "-o"):  # `-cFILE`: pytest's attached form too
            sub.error(f"no option {name if name.startswith('--') else name[:2]}: the merge is no pytest run; it reads the project's settings as a "
                      f"run started in its folder does, so run it in the folder its runs were started in, "
                      f"or give --summary-rows")
        if name[:1] == "-" and name[1:2].isalpha() and name[:2] != "-h":  # argparse said only `unrecognized`
            sub.error(f"no option {name}: {hint(name, known)}")
        # a prefix of a known option is argparse's abbreviation, its ambiguity argparse's to report
        if name.startswith("--") and not any(option.startswith(name) for option in known):
            sub.error(f"no option {name}: {hint(name, known)}")
    # a switch's nargs is 0: only the options that take one value can disagree
    valued = [name for action in sub._actions if action.nargs is None for name in action.option_strings
              if name.startswith("--")]
    problem = repeated(argv[1:], valued, options=known)  # prefixes resolve among all, as argparse's do
    if problem:  # argparse keeps the last: `--out a ... --out b` wrote b alone, without a word
        sub.error(problem)


class Terminated(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, ending the merge as Ctrl-C's KeyboardInterrupt does."""

    def __init__(self, number: int) -> None:
        super().__init__(signal.Signals(number).name)
        self.number = number


@contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """While the merge runs, its first SIGTERM or SIGHUP raises Terminated; the next one of either
    takes its default course again (ends the process at once)."""
    numbers = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    if threading.current_thread() is not threading.main_thread():  # only there can Python take signals
        yield
        return
    previous = {number: signal.getsignal(number) for number in numbers}

    def interrupt(number: int, frame: object) -> None:
        for each in numbers:
            signal.signal(each, signal.SIG_DFL)
        raise Terminated(number)

    for number in numbers:
        signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    _misspelt(parser, sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    args.baseline_dir_given = args.baseline_dir is not None
    if not args.baseline_dir_given:
        args.baseline_dir = DEFAULT_BASELINE_DIR
    try:
        with _terminations_interrupt():
            return merge_command(args)
    except SpecdecUsageError as exc:
        print(f"python -m pytest_specdec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # the shard folders are only read: running it again is the fix
        by = f" by {exc}" if isinstance(exc, Terminated) else ""
        try:
            print(f"python -m pytest_specdec {args.command}: interrupted{by}; --out {args.out} may hold an "
                  f"incomplete merge{_baseline_folder_left(args)}: run the merge again", file=sys.stderr)
        except OSError:  # a hung-up terminal takes no line; the exit status still says it
            pass
        return 128 + exc.number if isinstance(exc, Terminated) else 130


def _baseline_folder_left(args: argparse.Namespace) -> str:
    """What an interrupted --save-baseline left in the baseline folder: each file is replaced
    whole under its lock (whole_file.replace_text), so some may hold this merge's figures and
    others not; merging again pools no figure twice (BaselineEntry.is_save_of) and rewrites the
    durations, which it replaces rather than adds."""
    if not args.save_baseline:
        return ""
    return (f", and each baseline file and durations.json of --baseline-dir {args.baseline_dir} either "
            f"holds this merge's figures or is as it was, never half-written (a merge again with "
            f"--save-baseline saves what is missing and counts no figure twice)")


if __name__ == "__main__":
    sys.exit(main())
