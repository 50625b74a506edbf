"""A JUnit-compatible XML summary of report rows, for CI systems that read test results.

One `<testcase>` per row (class name: the configuration; name: the test id), a `<failure>` for a
failed test and for a configuration without a result, `<skipped>` for one not measured here, and
each figure, its verdict and the test's as a `<property>`, as a run's `--junitxml` carries them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence
from xml.etree import ElementTree as ET

from .report import ReportRow


def render(rows: Sequence[ReportRow], *, name: str = "pytest-specdec") -> bytes:
    failures = sum(r.outcome == "failed" for r in rows)
    errors = sum(r.outcome == "error" for r in rows)
    skipped = sum(r.outcome in ("skipped", "xfailed") for r in rows)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(rows)),
                          failures=str(failures), errors=str(errors), skipped=str(skipped))
    for row in rows:
        case = ET.SubElement(suite, "testcase", classname=row.config, name=row.test_id)
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


def write(path: str | Path, rows: Sequence[ReportRow], *, name: str = "pytest-specdec") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render(rows, name=name))
    return path


__all__ = ["render", "write"]
