"""What phase 2 builds: a registry name, ``module:Class`` or ``file.py[:Class]`` (resolve),
and out-of-tree models as vLLM's plugin loader finds them (plugins)."""
