#!/usr/bin/env bash
# The lowest versions pyproject.toml promises, checked: a venv of Python 3.10 (requires-python's
# lowest) holding exactly each declared lower bound (`name>=X` installed as `name==X`: the core
# dependencies, the test extra's pytest-xdist, pytest-timeout and hypothesis, the report extra's
# matplotlib, the models extra's huggingface_hub), the project installed without dependencies, and
# the unit tests that need no torch run under it. CI's venv holds the newest releases only, so
# nothing else notices an API that a lower bound lacks. Safe to re-run: it reinstalls only when
# pyproject.toml or this file change. Arguments go to pytest.
#
# SPECDEC_CHECK_END=newest checks the other end the same way: the newest Python (default python3.13)
# holding the newest release of each of those packages that pyproject.toml allows (its whole range,
# `name>=X` or `name>=X,<Y`, installed with `pip install -U`), the venv made again each day, since
# new releases come without pyproject.toml changing.
#
#   SPECDEC_CHECK_END      lowest (default) or newest
#   SPECDEC_LOWEST_PYTHON  the Python 3.10 interpreter (default python3.10)
#   SPECDEC_LOWEST_VENV    where the venv lives (default .venv-lowest)
#   SPECDEC_NEWEST_PYTHON  the newest Python (default python3.13)
#   SPECDEC_NEWEST_VENV    its venv (default .venv-newest)
set -euo pipefail
cd "$(dirname "$0")/.."

end=${SPECDEC_CHECK_END:-lowest}
case "$end" in
  lowest)
    python=${SPECDEC_LOWEST_PYTHON:-python3.10}
    venv=${SPECDEC_LOWEST_VENV:-.venv-lowest}
    epoch=
    if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then
      echo "lowest-check: $python does not run as Python 3.10 (requires-python's lowest): set" \
           "SPECDEC_LOWEST_PYTHON to one" >&2
      exit 1
    fi ;;
  newest)
    python=${SPECDEC_NEWEST_PYTHON:-python3.13}
    venv=${SPECDEC_NEWEST_VENV:-.venv-newest}
    epoch=$(date +%F)  # a day's newest releases
    if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null; then
      echo "newest-check: $python does not run as a Python newer than 3.10: set SPECDEC_NEWEST_PYTHON" \
           "to the newest one this machine has" >&2
      exit 1
    fi ;;
  *)
    echo "lowest-check: SPECDEC_CHECK_END is '$end': set it to lowest or newest" >&2
    exit 1 ;;
esac
stamp="$venv/.specdec-installed"
want=$( (cat pyproject.toml scripts/lowest-check.sh; echo "$python $epoch") | sha256sum | cut -d' ' -f1)

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  rm -rf "$venv"
  echo "$end-check: creating $venv with each declared $end version" >&2
  "$python" -m venv "$venv"
  # the requirement strings of pyproject.toml with a lower bound, from the tables named above, `>=`
  # made `==` for the lowest end, and for the newest kept with the rest of the range (installed with -U)
  pins=$("$venv/bin/python" - "$end" <<'EOF'
import re
import sys

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a fresh venv has no packaging, but its pip carries a copy
    try:
        from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
        from pip._vendor.packaging.utils import canonicalize_name
    except ImportError:
        raise SystemExit("lowest-check: neither packaging nor pip's copy of it imports in the venv, so "
                         "pyproject.toml's requirements cannot be read: pip install packaging there")

newest = sys.argv[1:] == ["newest"]
text = open("pyproject.toml").read()
wanted = {canonicalize_name(name) for name in (
    "pytest", "tomli", "aiohttp", "filelock", "psutil", "prometheus_client", "pytest-benchmark",
    "pytest-xdist", "pytest-timeout", "hypothesis", "matplotlib", "huggingface_hub")}
seen = set()
# every double-quoted string that parses as a requirement: spaces, ranges, extras and markers too
for string in re.findall(r'"([^"\n]*)"', text):
    try:
        req = Requirement(string)
    except InvalidRequirement:
        continue
    name = canonicalize_name(req.name)
    lower = [spec.version for spec in req.specifier if spec.operator == ">="]
    if name in wanted and name not in seen and lower:
        seen.add(name)
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        # the newest end keeps the whole range (an upper bound, a `!=`): -U takes the newest it allows
        version = str(req.specifier) if newest else f"=={lower[0]}"
        print(f"{req.name}{extras}{version}" + (f"; {req.marker}" if req.marker else ""))
missing = wanted - seen
if missing:
    raise SystemExit(f"lowest-check: pyproject.toml declares no lower bound for {sorted(missing)}: "
                     f"update the list in scripts/lowest-check.sh")
EOF
  )
  mapfile -t pins <<< "$pins"
  pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
  upgrade=()
  [ "$end" = newest ] && upgrade=(-U)
  "${pip[@]}" ${upgrade[@]+"${upgrade[@]}"} "${pins[@]}"
  "${pip[@]}" --no-deps -e .
  echo "$want" > "$stamp"
fi
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -iE '^(pytest|pytest-benchmark|pytest-xdist|pytest-timeout|aiohttp|filelock|psutil|prometheus.client|tomli|hypothesis|matplotlib|huggingface.hub) ' \
  | awk '{printf "%s%s %s", sep, $1, $2; sep=", "} END {print ""}' | sed "s/^/$end-check: /" >&2

# Files and tests that start the embedded engine (torch, the `engine` extra) and do not skip without it.
needs_torch=(
  --ignore=tests/unit/test_bench_suite.py --ignore=tests/unit/test_servers_pool.py
  --ignore=tests/unit/test_servers_process.py --ignore=tests/unit/test_sglang_contract.py
  --deselect=tests/unit/test_host_claims.py::test_a_symlinked_claim_file_fails_the_test_with_one_line
  --deselect=tests/unit/test_host_claims.py::test_the_embedded_engine_on_the_cpu_serves_a_dry_runs_slots_beyond_the_runs_gpus
  --deselect=tests/unit/test_plugin.py::test_an_xdist_worker_checks_the_backend_once_as_one_process_does
  --deselect=tests/unit/test_plugin.py::test_results_json_records_each_gpus_memory_and_power_limit
  --deselect=tests/unit/test_readme.py::test_the_readme_example_runs_its_cpu_matrix
)
exec "$venv/bin/python" -m pytest -p no:cacheprovider -p no:randomly -q "${needs_torch[@]}" \
  tests/unit "$@"
