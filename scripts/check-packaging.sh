#!/usr/bin/env bash
# Every walfeed process starts from `pip install .` alone: in a fresh virtualenv without extras, every module of
# services/ imports (but services/core/otel.py, which only the otel extra's traces load) and every command answers
# --help. Catches a runtime dependency declared only in a test or bench extra. Reuses pip's cache: ~1 min.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check . 2> >(grep -v "^WARNING: Location" >&2)
cd "$scratch"  # away from the source tree: the installed package only
"$scratch/venv/bin/python" - <<'PY'
import importlib
import pkgutil

import services

LAZY = {"services.core.otel"}  # imported only with OTEL_EXPORTER_OTLP_ENDPOINT set, from the otel extra
names = [m.name for m in pkgutil.walk_packages(services.__path__, "services.")
         if m.name not in LAZY and not m.name.endswith(".__main__")]  # __main__ runs the command
for name in names:
    importlib.import_module(name)
print(f"check-packaging: {len(names)} modules import from a plain install")
PY
for command in api relay worker notifier deliver embedder embed migrate status dead prune-outbox prune-notifications; do
  "$scratch/venv/bin/walfeed" "$command" --help > /dev/null || { echo "check-packaging: walfeed $command --help failed" >&2; exit 1; }
done
echo "check-packaging: every command answers --help"
