#!/usr/bin/env bash
# The README's test command: create .venv, install handoffmon with the dev extra (every
# integration + test tools), type-check with mypy (strict, incremental cache in .mypy_cache),
# then run pytest. Arguments go to pytest: `bash scripts/test.sh -m slow` runs the slow tests.
# `-n auto --dist loadfile` (pytest-xdist): the default suite runs one worker more than cores, each
# test file on one worker (its module-scoped servers start once); the slow tests run serially
# (tests/conftest.py's pytest_xdist_auto_num_workers). `-n 0` runs anything serially.
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True
# Let Python cache bytecode (some environments set PYTHONDONTWRITEBYTECODE): without it every
# pytest worker re-runs assertion rewriting on every test module and every `handoffmon`
# subprocess the tests start recompiles the package from source (docs/development.md).
unset PYTHONDONTWRITEBYTECODE
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev]'
.venv/bin/mypy
exec .venv/bin/python -m pytest -n auto --dist loadfile "$@"
