#!/usr/bin/env bash
# The README's first command: create .venv, install handoffmon with the demo extra, run the demo
# on embedded defaults (no API key, no network). Arguments go to `handoffmon demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[demo]'
exec .venv/bin/handoffmon demo "$@"
