"""Runs a composite action's steps locally, as a GitHub runner would: inputs from their
defaults and ``with:``, ``${{ }}`` expressions evaluated (the subset action.yml uses:
contexts, ``||``, ``&&``, ``==``, ``!=``, ``!``, ``format``, ``always``, ``success``,
``failure``, ``hashFiles``), each ``shell: bash`` step run with ``bash -eo pipefail``, its
``$GITHUB_OUTPUT`` read back into ``steps.<id>.outputs``. Steps that call other actions
(``uses:``) cannot run here: they are recorded with their evaluated ``with:``."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<op>\|\||&&|==|!=|!|\(|\)|,)|(?P<name>[A-Za-z_][\w.-]*))"
)
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def _lookup(contexts: dict[str, Any], dotted: str) -> Any:
    value: Any = contexts
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None  # GitHub: a missing property is null
        value = value[part]
    return value


def evaluate(expr: str, contexts: dict[str, Any], functions: dict[str, Any]) -> Any:
    """One expression, translated token by token to Python (``||``/``&&`` return an
    operand, as GitHub's do)."""
    out, pos, expr = [], 0, expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read the expression at {expr[pos:]!r}")
        pos = m.end()
        if m["str"] is not None:
            out.append(repr(m["str"][1:-1].replace("''", "'")))
        elif m["num"] is not None:
            out.append(m["num"])
        elif m["op"] is not None:
            out.append({"||": " or ", "&&": " and ", "!": " not "}.get(m["op"], m["op"]))
        elif m["name"] in ("true", "false", "null"):
            out.append({"true": "True", "false": "False", "null": "None"}[m["name"]])
        elif expr[pos:].lstrip().startswith("("):
            out.append(f"_fn[{m['name']!r}]")
        else:
            out.append(f"_ctx({m['name']!r})")
    names = {"_fn": functions, "_ctx": lambda dotted: _lookup(contexts, dotted)}
    return eval("".join(out), {"__builtins__": {}}, names)


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class StepRun:
    name: str
    ran: bool  # False: its ``if`` was false, or it is a ``uses:`` step
    uses: str = ""
    with_: dict[str, str] = field(default_factory=dict)
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass
class ActionRun:
    steps: list[StepRun]
    failed: bool

    def step(self, name: str) -> StepRun:
        return next(s for s in self.steps if s.name == name)


def run_action(
    action: dict[str, Any],
    with_: dict[str, str],
    github: dict[str, Any],
    env: dict[str, str],
    workspace: Path,
    skip: frozenset[str] = frozenset(),
    runner: dict[str, str] | None = None,
    timeout: float = 300,
) -> ActionRun:
    """Run ``action`` (parsed action.yml) in ``workspace``. ``github`` is the github
    context; ``env`` the runner's environment (GITHUB_* variables among it); ``skip`` names
    steps not to run (recorded as not run); ``runner`` the runner context (default: a
    Linux X64 runner, whose RUNNER_* variables the steps see too)."""
    inputs = {k: str(spec.get("default", "")) for k, spec in action.get("inputs", {}).items()}
    inputs.update(with_)
    runner = runner or {"os": "Linux", "arch": "X64"}
    env = {**env, **{f"RUNNER_{k.upper()}": v for k, v in runner.items()}}
    contexts: dict[str, Any] = {"inputs": inputs, "github": github, "runner": runner, "steps": {}}
    failed = False

    def hash_files(*patterns: str) -> str:
        found = [p for pattern in patterns for p in sorted(workspace.glob(pattern)) if p.is_file()]
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in found)).hexdigest()
        return digest if found else ""

    functions = {
        "always": lambda: True,
        "success": lambda: not failed,
        "failure": lambda: failed,
        "hashFiles": hash_files,
        "format": lambda text, *args: re.sub(
            r"\{(\d+)\}", lambda m: as_text(args[int(m[1])]), text
        ),
    }

    def interpolate(text: str) -> str:
        return _EXPR.sub(lambda m: as_text(evaluate(m[1], contexts, functions)), str(text))

    runs: list[StepRun] = []
    for i, step in enumerate(action["runs"]["steps"]):
        name = step.get("name") or step.get("uses") or f"step {i}"
        condition = _EXPR.sub(lambda m: m[1], str(step.get("if", "success()")))
        if name in skip or not evaluate(condition, contexts, functions):
            runs.append(StepRun(name, False))
            continue
        if "uses" in step:
            args = {k: interpolate(v) for k, v in (step.get("with") or {}).items()}
            runs.append(StepRun(name, False, uses=step["uses"], with_=args))
            continue
        result = _run_bash(step, interpolate, env, workspace, i, timeout)
        outputs = _outputs(workspace / f".github_output_{i}")
        if "id" in step:
            contexts["steps"][step["id"]] = {"outputs": outputs}
        runs.append(result)
        failed = failed or result.returncode != 0
    return ActionRun(runs, failed)


def _run_bash(
    step: dict, interpolate: Any, env: dict[str, str], workspace: Path, i: int, timeout: float
) -> StepRun:
    assert step.get("shell") == "bash", step
    script = workspace / f".github_step_{i}.sh"
    script.write_text(interpolate(step["run"]))
    step_env = {k: interpolate(v) for k, v in (step.get("env") or {}).items()}
    output = workspace / f".github_output_{i}"
    output.write_text("")
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=workspace,
        env={**env, **step_env, "GITHUB_OUTPUT": str(output)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    name = step.get("name") or f"step {i}"
    return StepRun(name, True, returncode=done.returncode, stdout=done.stdout, stderr=done.stderr)


def _outputs(path: Path) -> dict[str, str]:
    """``name=value`` lines and ``name<<DELIM`` blocks, as GitHub reads $GITHUB_OUTPUT."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[key] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        key, _, value = line.partition("=")
        out[key] = value
        i += 1
    return out


def runner_env(path_first: Path, **github_vars: str) -> dict[str, str]:
    """The environment a step sees: this one, ``path_first`` first on PATH, GitHub's
    variables, no proxies (the stand-in API is local)."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    env.update({"CI": "true", "GITHUB_ACTIONS": "true", "NO_COLOR": "1", **github_vars})
    return env
