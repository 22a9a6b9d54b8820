#!/usr/bin/env bash
# Static checks on the package as it is installed: build a wheel of the repository, install it in a fresh temporary
# venv with the checkers, and run them there against site-packages (not against the source folders).
#
# Why a wheel: the repository's folders doctor/, checks/, reports/, compat_matrix/ map into the one dl_doctor
# package (setup.cfg package_dir). An ordinary editable install serves the mapped folders through an import hook
# that mypy cannot follow; a wheel installs the package exactly as users get it. (For an IDE or a quick mypy run,
# `pip install -e . --config-settings editable_mode=strict` links the files instead: CONTRIBUTING.md.)
#
# Usage: bash tools/static_checks.sh      (PYTHON=python3.X to choose the interpreter)
# Exits non-zero on any error; prints the counts; removes everything it created.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"

work="$(mktemp -d "${TMPDIR:-/tmp}/dld-static.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The checkers, pinned like the `test` extra pins them (setup.cfg). Read from there so the two cannot drift.
mypy_req="$(sed -n 's/^[[:space:]]*\(mypy[=<>~!][^#[:space:]]*\).*/\1/p' "$repo/setup.cfg" | head -n1)"
linter_req="$(sed -n 's/^[[:space:]]*\(import-linter[=<>~!][^#[:space:]]*\).*/\1/p' "$repo/setup.cfg" | head -n1)"
if [ -z "$mypy_req" ] || [ -z "$linter_req" ]; then
  echo "static_checks: no mypy or import-linter pin in setup.cfg's test extra" >&2
  exit 2
fi

echo "== a fresh venv"
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --quiet --disable-pip-version-check)

echo "== building the wheel (pip wheel --no-deps) from a clean copy of the tree"
# A copy: setuptools would reuse the repository's build/ (a module removed from the source stays in build/lib and
# lands in the wheel), and it writes build/ and *.egg-info where it builds.
mkdir "$work/src"
tar -C "$repo" --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist --exclude='*.egg-info' \
  --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis --exclude=.mypy_cache -cf - . \
  | tar -C "$work/src" -xf -
"${pip[@]}" wheel --no-deps --wheel-dir "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/dl_doctor-*.whl)"
echo "$(basename "$wheel")"

echo "== installing the wheel and the checkers ($mypy_req, $linter_req)"
# The dependencies as a Python 3.9 user gets them, whatever this interpreter is: mypy reads their sources with
# Python 3.9's grammar (setup.cfg [mypy] python_version), and click 8.2 and packaging 26 and later (both Python >= 3.10,
# so a Python 3.9 user never gets them) use `match`.
printf 'click<8.2\npackaging<26\n' >"$work/py39-constraints.txt"
"${pip[@]}" install -c "$work/py39-constraints.txt" "$wheel" "$mypy_req" "$linter_req"

# From here on, run in the temporary directory: the repository's source folders must not shadow the installed package.
cd "$work"
site="$("$work/venv/bin/python" -c 'import dl_doctor, os; print(os.path.dirname(os.path.dirname(dl_doctor.__file__)))')"
if [ ! -f "$site/dl_doctor/py.typed" ]; then
  echo "static_checks: the wheel has no dl_doctor/py.typed" >&2
  exit 1
fi

echo "== mypy -p dl_doctor (the installed package, with $repo/setup.cfg)"
start=$SECONDS
rc=0
"$work/venv/bin/python" -m mypy --config-file "$repo/setup.cfg" --cache-dir "$work/mypy-cache" -p dl_doctor \
  >"$work/mypy.out" 2>&1 || rc=$?
# Paths in mypy's report point into the temporary venv; show them from the package down.
sed -e "s#^$site/##" -e "s#^${site#"$work"/}/##" "$work/mypy.out"
errors="$(grep -c ': error: ' "$work/mypy.out" || true)"
files="$({ grep ': error: ' "$work/mypy.out" || true; } | cut -d: -f1 | sort -u | wc -l)"
echo "mypy: exit $rc, $errors error(s) in $files file(s), $((SECONDS - start)) s"
if [ "$rc" -ne 0 ] || [ "$errors" -ne 0 ]; then
  echo "static_checks: mypy failed" >&2
  exit 1
fi

echo "== lint-imports (the layer rules: setup.cfg [importlinter], docs/architecture.md)"
start=$SECONDS
rc=0
"$work/venv/bin/lint-imports" --config "$repo/setup.cfg" --no-cache >"$work/lint.out" 2>&1 || rc=$?
grep -E "KEPT|BROKEN|^Contracts:" "$work/lint.out" || true
echo "lint-imports: exit $rc, $((SECONDS - start)) s"
if [ "$rc" -ne 0 ]; then
  sed -n '/^Broken contracts/,$p' "$work/lint.out"
  echo "static_checks: a layer rule is broken" >&2
  exit 1
fi
echo "static checks: OK"
