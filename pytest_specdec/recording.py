"""`Recorder` (the `specdec_record` fixture): where a test's figures go once measured.

While the test runs, figures are collected; when its call ends, `session.finish_test` (from the
plugin's `pytest_runtest_call` wrapper) takes them as `to_result` gives them: appended to the
journal (fsync'd, so a crash loses nothing already measured), attached to the test report
(`attach_to_report`, so xdist workers' results reach the controller's table, report and baseline
file), and compared with the baseline: a regression fails that test with one line per metric.

pytest-benchmark gets the time samples through its public API: the test is marked with a replay
clock as its `timer`, and `benchmark.pedantic` runs one round per sample, each advancing the
clock by exactly that sample. Its statistics, `--benchmark-autosave` and `--benchmark-compare`
therefore see per-token latencies (generation) or kernel times, not the cost of a no-op. A test
that times its own code with the fixture keeps that timing (it takes one a test).
Each record also says where and what it measured (`benchmark_info.py`).
"""

from __future__ import annotations

import json
import math
import numbers
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pytest

from . import benchmark_info
from .collection import case_of, counted
from .lossless import Outputs
from .directions import METRIC_NAME, Direction, case_clash, known_directions
from .metrics import Measurement, MetricValue, RequestRecord, direction_of
from .result import Result
from .sampling_rule import decodes_greedily

#: Key of the test-report user property that carries one test's results to the controller.
RESULT_PROPERTY = "specdec_result"
#: Carries a resumed (skipped) test's journaled results to the controller.
RESUMED_PROPERTY = "specdec_resumed"
#: Names, on a resumed test's stand-in that skipped because the reference this run measures had
#: recorded no outputs yet, that reference: the controller settles its verdict once they come.
AWAITS_PROPERTY = "specdec_awaits"
#: Says, on a resumed test's stand-in, where its figures come from: its progress line names it.
STOOD_IN_PROPERTY = "specdec_stood_in"
#: Says, on a test that resume measures again, which parts of its fingerprint changed.
REMEASURED_PROPERTY = "specdec_remeasured"
#: Attribute of an xdist worker's call reports: how many of its tests can record (the total of
#: the controller's progress lines, which it cannot count: it collects nothing).
RECORDING_TOTAL = "specdec_recording_total"
#: Attribute of the reports of a test that records without having been counted in that total
#: (it fetched `specdec_record` with `request.getfixturevalue`): the controller raises its total.
UNCOUNTED = "specdec_uncounted"

_RECORDER_KEY = pytest.StashKey["Recorder"]()


class _ReplayClock:
    """The pytest-benchmark timer of recorded tests: while it replays samples it only moves when
    told to; otherwise it is `time.perf_counter`, so a test that times its own code with the
    `benchmark` fixture gets real timings (a still clock fails pytest-benchmark's calibration)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.replaying = False

    def __call__(self) -> float:
        return self.now if self.replaying else time.perf_counter()

    def advance(self, seconds: float) -> None:
        self.now += seconds


replay_clock = _ReplayClock()
replay_clock.__name__ = "replay_clock"  # type: ignore[attr-defined]  # pytest-benchmark prints it


class SamplesNotFedWarning(UserWarning):
    """A recording test timed its own code with pytest-benchmark's fixture, which keeps one
    timing a test: its recorded samples went to the journal only."""


@dataclass
class Recorder:
    """Figures of one test. `metric()` for one value, `result()` for a workload measurement,
    `samples()` for time samples that pytest-benchmark should see."""

    item: pytest.Item
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    workload: str | None = None
    outputs: Outputs | None = None  # greedy outputs, for the losslessness guard
    info: dict[str, Any] = field(default_factory=dict)  # Result.details
    finished: bool = False
    pending_samples: list[tuple[list[float], str]] = field(default_factory=list)

    def _declared(self) -> Mapping[str, Direction]:
        """The configuration's `[tool.specdec.metrics]`."""
        from .state import STATE_KEY

        state = self.item.config.stash.get(STATE_KEY, None)
        return state.config.metrics if state is not None else {}

    @property
    def test_id(self) -> str:
        """The key of this test in baselines and the journal: its name with parameters."""
        return self.item.name

    def metric(self, name: str, value: float, direction: str | None = None, *,
               spread: float = 0.0, samples: int = 1, deterministic: bool = False) -> None:
        """Record one figure; built-in and declared metrics know their direction, others must
        state it. A misuse is a ValueError that names the fix, its traceback ending at the
        test's line (`__tracebackhide__`): the mistake is there, not in the plugin."""
        __tracebackhide__ = True
        # a name a tolerance cannot spell (--specdec-compare-fail, [tool.specdec.tolerances]) is
        # never gated, and its baseline entry and JUnit property would carry it as it is
        if not isinstance(name, str) or not METRIC_NAME.match(name):
            raise ValueError(f"metric {name!r} is not a metric name: letters, digits, _ and ., not "
                             f"starting with a digit (e.g. kv_hit_rate)")
        number = _number(value)
        if number is None:  # float() would take True and "1e3"; nan and inf cannot be compared
            raise ValueError(f"metric {name!r}: value {value!r} is not a number"
                             + (" (a finite one)" if isinstance(value, numbers.Real) else ""))
        declared = self._declared()
        clash = case_clash(name, declared)
        if clash:
            raise ValueError(clash)
        if direction is None:
            try:
                direction = direction_of(name, declared)
            except KeyError as exc:  # its message, not KeyError's quoted repr of it
                raise ValueError(exc.args[0]) from None
        if direction not in ("higher", "lower"):
            raise ValueError(f"metric {name!r}: direction {direction!r} is not a direction; write "
                             f"\"higher\" (bigger is better) or \"lower\"")
        known = known_directions(declared).get(name)
        if known is not None and direction != known:  # it would be gated the wrong way round
            raise ValueError(f"metric {name!r}: direction {direction!r}, but {known!r} is better for "
                             f"{name}; leave the direction out")
        # checked here, not when a later run reads the baseline it would be saved into
        if _number(spread) is None or _number(spread) < 0:
            raise ValueError(f"metric {name!r}: spread {spread!r} must be a finite number >= 0 "
                             f"(the standard error of the value; 0, the default, compares it exactly)")
        if isinstance(samples, bool) or not isinstance(samples, (numbers.Integral, float)) \
                or not float(samples).is_integer() or samples < 1:
            raise ValueError(f"metric {name!r}: samples {samples!r} must be an integer >= 1 "
                             f"(how many measurements the value is made of)")
        self.metrics[name] = MetricValue(name, number, direction, float(spread), int(samples),
                                         deterministic)

    def result(self, measurement: Measurement, *, records: Sequence[RequestRecord] = (),
               deterministic_accept: bool = False) -> Measurement:
        """Record a workload's figures (and its per-token latencies for pytest-benchmark)."""
        __tracebackhide__ = True  # a second measurement is the test's mistake
        self._first_measurement()
        for value in measurement.metrics(deterministic_accept=deterministic_accept):
            self.metrics[value.name] = value
        self.workload = measurement.workload
        self.info["measurement"] = measurement.to_dict()
        tpots = [r.tpot_ms / 1000.0 for r in records if r.ok and r.tpot_ms is not None]
        if tpots:
            self.samples(tpots, unit="s/token")
        return measurement

    def run(self, server: Any, workload: Any) -> Measurement:
        """Run `workload` on `server` (a `specdec_server`) and record everything it measured."""
        __tracebackhide__ = True  # a second measurement is the test's mistake
        self._first_measurement()  # before the workload runs, not after it
        measurement = server.run(workload)
        temperature = getattr(workload, "temperature", 0.0)
        greedy = decodes_greedily(temperature, dict(getattr(workload, "extra_sampling", ())).get("top_k"))
        records = server.last_result.records if server.last_result is not None else ()
        if not greedy:  # the workload run may not be the configured one: the end of the run says it went unchecked
            self.info["temperature"] = temperature
        if greedy and records:
            self.outputs = Outputs(tuple(r.output_ids for r in records), tuple(r.text for r in records),
                                   tuple(r.prompt_tokens for r in records), self._spans(server, records),
                                   tuple(r.margins for r in records))
        figures = getattr(server, "last_server_figures", None)
        if figures is not None:
            self.info["server_figures"] = {
                "source": figures.source, "accept_length": figures.accept_length,
                "accept_rate": figures.accept_rate, "gen_throughput": figures.gen_throughput,
                "avg_accepted_depth": figures.avg_accepted_depth, "lines": figures.lines}
        if getattr(server, "placement", ""):  # which GPUs a slow configuration ran on, from any worker
            self.info["gpus"] = server.placement
        if getattr(server, "disagreements", None):
            self.info["disagreements"] = list(server.disagreements)
        if getattr(server, "last_shared", None) is not None:  # the gate fails it: sharing.py
            self.info["shared"] = server.last_shared.to_json()
        return self.result(measurement, records=records, deterministic_accept=greedy)

    def _spans(self, server: Any, records: Sequence[RequestRecord]) -> tuple[int, tuple[int | None, ...]] | None:
        """Where `prefix:N` cuts the texts the server sent no token ids for, counted while it is
        up (`Outputs.spans`); None where every output has its ids, or the mode is no prefix."""
        from .state import STATE_KEY

        state = self.item.config.stash.get(STATE_KEY, None)
        if state is None or state.lossless.mode != "prefix" or all(r.output_ids is not None for r in records):
            return None
        from .text_spans import counter_spans

        textual = [i for i, r in enumerate(records) if r.output_ids is None]  # ids need no count
        counted = counter_spans([records[i].text for i in textual], state.lossless.prefix,
                                getattr(server, "token_counter", None))
        if counted is None:
            return None
        spans: list[int | None] = [None] * len(records)
        for i, span in zip(textual, counted[1]):
            spans[i] = span
        return counted[0], tuple(spans)

    def _first_measurement(self) -> None:
        """A test records one workload measurement: a second would replace the first's figures,
        outputs and journal record, and pytest-benchmark takes one set of samples a test."""
        __tracebackhide__ = True
        if "measurement" in self.info:
            raise ValueError(f"specdec_record holds one workload measurement per test, and {self.test_id} "
                             f"has recorded one already (workload {self.workload}); a second would replace "
                             f"its figures: measure one workload per test (each [[tool.specdec.workloads]] "
                             f"entry is a parameter of specdec_workload)")

    def samples(self, seconds: Iterable[float], unit: str = "s") -> None:
        """Time samples for pytest-benchmark (when it is active), one round each; handed over
        when the call ends, after the figures are journaled (a bridge failure loses nothing)."""
        values = [float(s) for s in seconds]
        if values:
            self.pending_samples.append((values, unit))

    def feed_benchmark(self, where: Mapping[str, Any]) -> None:
        """Give the pending samples to pytest-benchmark (called once the figures are journaled),
        with `where` (`measured_where`) among their extra info."""
        pending, self.pending_samples = self.pending_samples, []
        for values, unit in pending:
            self._feed(values, unit, where)

    def _feed(self, values: list[float], unit: str, where: Mapping[str, Any]) -> None:
        try:
            benchmark = self.item._request.getfixturevalue("benchmark")
        except pytest.FixtureLookupError:
            return  # pytest-benchmark is not installed: our own records are enough
        if getattr(benchmark, "_mode", None):  # pytest-benchmark takes one timing a test: the test's own
            benchmark.extra_info.update({name: v.value for name, v in self.metrics.items()})
            benchmark.extra_info[benchmark_info.KEY] = dict(where)
            if getattr(benchmark, "disabled", False):
                return  # under xdist it keeps nothing: nothing to say
            warnings.warn(SamplesNotFedWarning(
                f"{self.test_id}: it timed its own code with pytest-benchmark's benchmark fixture, which "
                f"takes one timing a test: pytest-benchmark keeps that one, with the recorded figures in "
                f"its extra_info, and the {len(values)} sample(s) of {unit} are in the journal only; time "
                f"your code in a test without specdec_record to have both"), stacklevel=1)
            return
        if getattr(benchmark, "disabled", False):
            # Under xdist pytest-benchmark switches itself off; our records still work. Used
            # once anyway (a no-op when disabled), else it warns "fixture was not used at all".
            benchmark.pedantic(lambda: None)
            return
        queue = iter(values)

        def one_sample() -> None:
            # --benchmark-cprofile calls it again after the rounds, under the profiler: no sample is left
            replay_clock.advance(next(queue, 0.0))

        benchmark.extra_info.update({name: v.value for name, v in self.metrics.items()})
        benchmark.extra_info["sample_unit"] = unit
        benchmark.extra_info[benchmark_info.KEY] = dict(where)
        # a new dict: pytest-benchmark holds the callspec's own
        benchmark.params = benchmark_info.saved_params(getattr(benchmark, "params", None))
        replay_clock.replaying = True
        try:
            benchmark.pedantic(one_sample, rounds=len(values), iterations=1, warmup_rounds=0)
        finally:
            replay_clock.replaying = False
        benchmark_info.warn_if_compared_otherwise(self.item.config, getattr(benchmark, "fullname", None),
                                                  self.test_id, where)

    def to_result(self) -> Result:
        """What the journal stores and the controller receives for this test."""
        return Result(test_id=self.test_id, nodeid=self.item.nodeid, case=case_of(self.item),
                      workload=self.workload or _parametrized_workload(self.item),
                      metrics=tuple(self.metrics.values()),
                      time=time.time(), details=dict(self.info), outputs=self.outputs)


def _number(value: Any) -> float | None:
    """`value` as a finite float, or None where it is no number (a bool or a string, which
    float() would take, an object it would not) or not finite."""
    if isinstance(value, (bool, str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _parametrized_workload(item: pytest.Item) -> str | None:
    """The workload `item` is parametrized with (`specdec_workload`): a test that records only
    with `metric()` measured it all the same, and its row names it."""
    callspec = getattr(item, "callspec", None)
    workload = callspec.params.get("specdec_workload") if callspec else None
    return getattr(workload, "name", None)


def new_recorder(item: pytest.Item) -> Recorder:
    """The recorder of this attempt of `item`. A test run again on the same item (pytest-
    rerunfailures) journals, gates and reports its own figures: its earlier attempt's recorder
    and the properties that carried that attempt's figures are dropped."""
    drop_results(item)
    item.stash[_RECORDER_KEY] = Recorder(item)
    _replay_clock_timer(item)  # a test that fetched the recorder as it ran was not marked at collection
    return item.stash[_RECORDER_KEY]


def drop_results(item: pytest.Item) -> None:
    """Remove the properties that carried an earlier attempt's figures to its report."""
    attempt = (RESULT_PROPERTY, AWAITS_PROPERTY, STOOD_IN_PROPERTY)
    item.user_properties[:] = [(name, value) for name, value in item.user_properties
                               if name not in attempt and not name.startswith("specdec.")]


def existing_recorder(item: pytest.Item) -> Recorder | None:
    return item.stash.get(_RECORDER_KEY, None)


def records_uncounted(item: pytest.Item) -> bool:
    """Whether `item` has a recorder but was not counted in the progress lines' total."""
    return existing_recorder(item) is not None and not counted(item)


def show_benchmark_fixture(items: list[pytest.Item]) -> list[list[str]]:
    """Name pytest-benchmark's fixture in each recording test's fixture list while the item hooks
    run (it is requested when the measurement is fed to it, not at setup); returns the lists to
    restore with :func:`hide_benchmark_fixture`."""
    shown = []
    for item in items:
        names = getattr(item, "fixturenames", None)
        if isinstance(names, list) and "specdec_record" in names and "benchmark" not in names:
            names.append("benchmark")  # items of one function share the list: once per list
            shown.append(names)
    return shown


def hide_benchmark_fixture(shown: list[list[str]]) -> None:
    for names in shown:
        if "benchmark" in names:
            names.remove("benchmark")


def mark_for_benchmark(item: pytest.Item) -> None:
    """Give recorded tests the replay clock as their pytest-benchmark timer."""
    if "specdec_record" in getattr(item, "fixturenames", ()):
        _replay_clock_timer(item)


def _replay_clock_timer(item: pytest.Item) -> None:
    """The replay clock as `item`'s pytest-benchmark timer, unless a mark of its own names one:
    read when the `benchmark` fixture is made, which `Recorder.feed_benchmark` asks for."""
    if item.get_closest_marker("benchmark") is None \
            and item.config.pluginmanager.hasplugin("benchmark"):  # else an unknown mark, warned of
        item.add_marker(pytest.mark.benchmark(timer=replay_clock, group=item.originalname
                                              if hasattr(item, "originalname") else None))


def attach_to_report(item: pytest.Item, result: Result) -> None:
    """user_properties travel with the report to the xdist controller and into JUnit XML."""
    item.user_properties.append((RESULT_PROPERTY, json.dumps(result.to_json())))
    for metric in result.metrics:
        item.user_properties.append((f"specdec.{metric.name}", metric.value))
    for metric, verdict in result.figure_verdicts().items():
        item.user_properties.append((f"specdec.{metric}.verdict", verdict))
    if result.verdict:  # the test's, under the name a merge's junit.xml gives it
        item.user_properties.append(("specdec.verdict", result.verdict))
    if result.workload:
        item.user_properties.append(("specdec.workload", result.workload))


def drop_carriers(report: pytest.TestReport | pytest.Item) -> None:
    """Remove the properties that only carry results to the controller (a whole result, outputs
    included, is kilobytes a test), in place, from a report once every hook read it, and from the
    item once its last report was made: each report copies the item's list, and the item and the
    reports pytest keeps (the terminal's stats) would otherwise hold every test's result to the end."""
    carriers = (RESULT_PROPERTY, RESUMED_PROPERTY, REMEASURED_PROPERTY, AWAITS_PROPERTY, STOOD_IN_PROPERTY)
    report.user_properties[:] = [(name, value) for name, value in report.user_properties
                                 if name not in carriers]


def drop_figures(report: pytest.TestReport) -> None:
    """Remove the figures and verdicts of an attempt that failed and was run again, in place:
    JUnit writes that attempt as a test case of its own, with no failure in it, where its
    figures would read as a passing measurement."""
    report.user_properties[:] = [(name, value) for name, value in report.user_properties
                                 if not str(name).startswith("specdec.")]


def result_of_report(report: pytest.TestReport) -> Result | None:
    """The `Result` a test report carries (from this process or an xdist worker), if any."""
    for name, value in getattr(report, "user_properties", ()):
        if name == RESULT_PROPERTY:
            return Result.from_json(json.loads(value))
    return None


