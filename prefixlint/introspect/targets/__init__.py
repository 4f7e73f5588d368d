"""What phase 2 builds: a registry name, ``module:Class`` or ``file.py[:Class]`` (resolve),
out-of-tree models as vLLM's plugin loader finds them (plugins), and a real checkpoint's
layout and a LoRA adapter's names read without a weight (checkpoint, adapter: stdlib only,
as the command line reads them before any worker starts)."""
