"""The worker process and what it sets up before vLLM loads: the parent's side (client) and
the child's job loop (server), where a hang or crash was (crash), the environment (env,
cpuworker), optional packages (optional) and stand-ins for compiled kernels (kernels)."""
