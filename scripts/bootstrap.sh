#!/usr/bin/env bash
# Everything walfeed needs on this machine: infrastructure (scripts/setup-infra.sh) and a virtualenv in .venv
# with walfeed installed editable plus its test tools (pytest, ruff, mypy, schemathesis, check-jsonschema for
# compose.yaml: the `test` extra of pyproject.toml) and OpenTelemetry (the `otel` extra, so the tracing tests run).
# Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-infra.sh
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "bootstrap: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.walfeed-installed
if [[ ! -f $stamp ]] || [[ pyproject.toml -nt $stamp ]]; then
  echo "bootstrap: installing walfeed with its test, benchmark and tracing dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[test,bench,otel]'
  touch "$stamp"
fi
echo "bootstrap: ready (.venv/bin/walfeed)"
