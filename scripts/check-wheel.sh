#!/usr/bin/env bash
# The package as a user gets it: build the sdist and the wheel (python -m build, the wheel from
# the sdist), check what the wheel carries, install it without extras into a fresh virtual
# environment and use it there: `pytest --help`, then a small project with a `cpu` matrix run
# under --strict-markers, one of whose tests drives pytester, and a test that needs a server (which
# must say in one line that the engine extra is missing). No extra means no torch, so this needs
# neither the CPU torch nor a GPU. Everything stays under build/wheel-check.
set -euo pipefail
cd "$(dirname "$0")/.."

py=${SPECDEC_VENV:-.venv}/bin/python
work=build/wheel-check
rm -rf "$work"
mkdir -p "$work/project"

"$py" -m pip install --disable-pip-version-check -q build
echo "check-wheel: building the sdist and the wheel (python -m build)" >&2
if ! "$py" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1; then
  cat "$work/build.log" >&2
  exit 1
fi
wheel=$(ls "$work"/dist/*.whl)

"$py" - "$wheel" <<'EOF'
import sys, zipfile

names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = {name.split("/")[0] for name in names}
wanted = ["specdec_kernels/__init__.py", "pytest_specdec/plugin.py",
          *(f"pytest_specdec/prompts/{name}.jsonl" for name in ("chat", "code", "math"))]
missing = [name for name in wanted if name not in names]
if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
    missing.append("*.dist-info/licenses/LICENSE")
if missing or "kernels" in tops:
    sys.exit(f"check-wheel: the wheel lacks {missing} or has a top-level `kernels` ({sorted(tops)})")
print(f"check-wheel: the wheel carries {', '.join(sorted(tops))}, the prompt sets and the license",
      file=sys.stderr)
EOF

echo "check-wheel: installing the wheel into a fresh virtual environment" >&2
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --disable-pip-version-check -q "$wheel"

cd "$work/project"
../venv/bin/python -m pytest --help > help.txt
grep -q -- "--specdec-backend" help.txt \
  || { echo "check-wheel: pytest --help does not list the plugin's options" >&2; exit 1; }
cat > pyproject.toml <<'EOF'
[tool.pytest.ini_options]
addopts = "--strict-markers -p pytester"

[tool.specdec.matrix.cpu]
methods = ["ar", "ddtree"]
tp = [1]
budget = [8]
EOF
cat > test_adoption.py <<'EOF'
def test_matrix_cell(specdec_spec):
    assert specdec_spec.method in ("ar", "ddtree")


def test_plugin_in_a_pytester_project(pytester):
    pytester.makepyfile("def test_inventory(specdec_hardware):\n"
                        "    assert specdec_hardware.family == 'hopper'\n")
    pytester.runpytest("--strict-markers", "--specdec-arch", "sm_90").assert_outcomes(passed=1)
EOF
../venv/bin/python -m pytest -q -p no:cacheprovider test_adoption.py

# A test that needs a server, without the engine extra (no torch here): one line saying what to
# install, and no test runs.
printf 'def test_generation(specdec_server):\n    assert specdec_server.url\n' > test_server.py
if ../venv/bin/python -m pytest -q -p no:cacheprovider test_server.py > server.txt 2>&1 \
    || ! grep -q "needs the \`engine\` extra, and torch.* not installed: pip install torch" server.txt; then
  cat server.txt >&2
  echo "check-wheel: a missing engine extra was not one line naming the install command" >&2
  exit 1
fi
echo "check-wheel: ok" >&2
