"""Speculative-decoding drafts built beside a target, as vLLM derives them: the plan
(plan), MTP configs and layers (mtp, mtp_layers), the Transformers backend's drafts (backend)."""
