"""prefixlint: a checker for vLLM model files."""

__version__ = "0.1.0"
