"""A JUnit-compatible XML summary of report rows, for CI systems that read test results.

One `<testcase>` per row, named as pytest's `--junitxml` names the test in one unsharded run
(class name: its file as a dotted path and its classes; name: the test id), so a CI history keeps
one series per test whether the run was sharded or not; a configuration without a result, which
has no test, takes its configuration for class name. A `<failure>` for a failed test and for a
configuration without a result, `<skipped>` for one not measured here, and each figure, its
verdict and the test's as a `<property>`, as a run's `--junitxml` carries them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Sequence
from xml.etree import ElementTree as ET

from .report import ReportRow
from .whole_file import replace_text


def classname_of(nodeid: str) -> str:
    """The class name pytest's --junitxml gives test `nodeid`: `tests/bench/test_x.py::TestA::test_b[p]`
    is `tests.bench.test_x.TestA` (its parameters may hold `::` and `/`, so they are cut first)."""
    names = nodeid.partition("[")[0].split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    return ".".join(names[:-1])


def render(rows: Sequence[ReportRow], *, name: str = "pytest-specdec",
           nodeids: Mapping[str, str] | None = None) -> bytes:
    """The XML of `rows`; `nodeids` maps a row's test id to its pytest node id (for its class name)."""
    failures = sum(r.outcome == "failed" for r in rows)
    errors = sum(r.outcome == "error" for r in rows)
    skipped = sum(r.outcome in ("skipped", "xfailed") for r in rows)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(rows)),
                          failures=str(failures), errors=str(errors), skipped=str(skipped))
    for row in rows:
        nodeid = (nodeids or {}).get(row.test_id)
        classname = classname_of(nodeid) if nodeid is not None else row.config
        case = ET.SubElement(suite, "testcase", classname=classname, name=row.test_id)
        properties = [(f"specdec.{metric}", f"{value!r}") for metric, value in row.metrics.items()]
        # each figure's verdict under the name a run's --junitxml gives it
        properties += [(f"specdec.{metric}.verdict", verdict) for metric, verdict in row.verdicts.items()]
        if row.verdict:
            properties.append(("specdec.verdict", row.verdict))
        if row.workload:
            properties.append(("specdec.workload", row.workload))
        if properties:
            holder = ET.SubElement(case, "properties")
            for key, value in properties:
                ET.SubElement(holder, "property", name=key, value=value)
        reason = row.reason or row.outcome
        if row.outcome in ("failed", "error"):
            tag = "failure" if row.outcome == "failed" else "error"
            ET.SubElement(case, tag, message=reason.splitlines()[0] if reason else "").text = reason
        elif row.outcome in ("skipped", "xfailed"):
            ET.SubElement(case, "skipped", message=reason)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write(path: str | Path, rows: Sequence[ReportRow], *, name: str = "pytest-specdec",
          nodeids: Mapping[str, str] | None = None) -> Path:
    """Replace `path` with the XML of `rows`, staged in a temporary file and renamed into place
    as the report's other files are: a write killed midway leaves the earlier file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, render(rows, name=name, nodeids=nodeids).decode("utf-8"), durable=True)
    return path


__all__ = ["classname_of", "render", "write"]
