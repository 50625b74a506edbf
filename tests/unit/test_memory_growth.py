"""A run's memory grows by at most one compact copy of each test's outputs: the test's recorder,
the properties that carried its result to the summary, and the journal's cache no longer keep them
(the journal on disk, which resume and merge read, has them); the summary's rows keep the one copy
its end-of-run losslessness verdicts compare, with the token ids in a machine array rather than
tuples of Python ints (36 bytes an id).

Measured with tracemalloc in an in-process run of many speculative configurations, each recording
large greedy outputs: a matrix of users' size (methods x TP x budgets x workloads, for hours) held
each test's outputs three to four times over, gigabytes by its end."""

from __future__ import annotations

import tracemalloc

PROMPTS, TOKENS = 32, 512
BUDGETS = 24  # speculative configurations, all held to one reference

PROJECT = """
[tool.specdec]
backend = "embedded"

[tool.specdec.matrix.cpu]
methods = ["ar", "ddtree"]
tp = [1]
budget = [{budgets}]
"""

TEST = """
import gc
import tracemalloc

from pytest_specdec.lossless import Outputs


def test_generation(specdec_spec, specdec_record):
    specdec_record.metric("output_tok_s", 100.0)
    specdec_record.outputs = Outputs(
        tuple(tuple(range(1000 + p, 1000 + p + {tokens})) for p in range({prompts})),
        tuple("word " * {tokens} + str(p) for p in range({prompts})))
    gc.collect()
    with open("memory.txt", "a") as fh:
        fh.write(f"{{tracemalloc.get_traced_memory()[0]}}\\n")
"""


def texts_size() -> int:
    """Bytes one test's output texts take in memory; its token ids are counted apart."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        texts = tuple("word " * TOKENS + str(p) for p in range(PROMPTS))
        size = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert texts
    return size


def test_memory_grows_by_at_most_one_copy_of_each_tests_outputs(pytester):
    pytester.makepyprojecttoml(PROJECT.format(budgets=", ".join(str(b) for b in range(1, BUDGETS + 1))))
    pytester.makepyfile(test_gen=TEST.format(tokens=TOKENS, prompts=PROMPTS))
    # traced in a run of its own: in a suite's worker each test's gc.collect walked that worker's
    # whole heap, under tracemalloc, ~2 s a test
    pytester.makeconftest("import tracemalloc\n\ntracemalloc.start()\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-q")
    result.assert_outcomes(passed=BUDGETS + 1)
    seen = [int(line) for line in (pytester.path / "memory.txt").read_text().split()]
    assert len(seen) == BUDGETS + 1
    # from the third speculative test on: the first tests' own caches (imports, the journal's first reading) settle
    settled = seen[3:]
    per_test = (settled[-1] - settled[0]) / (len(settled) - 1)
    # one copy of the texts and a machine integer (8 bytes, at most) an id; tuples of ints take 36 an id
    size = texts_size() + 8 * PROMPTS * TOKENS
    print(f"memory growth per test: {per_test / 1024:.0f} KiB; one test's outputs, compactly: {size / 1024:.0f} KiB")
    assert per_test < 1.5 * size, (f"memory grew by {per_test / 1024:.0f} KiB per test, against {size / 1024:.0f} "
                                   f"KiB of outputs each: they are held more than once, or their token ids as "
                                   f"Python ints")
