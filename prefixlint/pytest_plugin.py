"""``pytest --prefixlint-zoo``: phase 2 for every architecture of the installed vLLM's
registry, one test each, as vLLM's ``tests/models/test_initialization.py`` builds each model
(here on the meta device, without a GPU).

Registered through the ``pytest11`` entry point, so installing prefixlint is enough; it
does nothing unless ``--prefixlint-zoo`` is given. A test

- fails when phase 2 reports a finding of severity error (file:line, code, message);
- is skipped, with the reason, when phase 2 could not verify the architecture (a PFX600
  "not verified" note, a package this environment lacks, a config it could not
  synthesise): a gap of the tool or the machine is never the model's failure;
- passes otherwise, with its warnings shown as pytest warnings.

``-m prefixlint`` runs only these tests, ``-k Llama`` some of them.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

# A build that failed for a gap of config synthesis or of this machine says nothing about
# the model (as in ``prefixlint zoo``).
GAP_CATEGORIES = ("config-gap", "environment")
_WORKER = pytest.StashKey[Any]()


class PrefixlintWarning(UserWarning):
    """A phase-2 finding of severity warning."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("prefixlint", "prefixlint phase 2 (meta-device builds)")
    group.addoption(
        "--prefixlint-zoo",
        action="store_true",
        help="Add one test per architecture of the installed vLLM's registry: build it on "
        "the meta device and check its prefixes (needs torch and vLLM).",
    )
    group.addoption(
        "--prefixlint-tp",
        default=None,
        help="Tensor-parallel sizes to build, comma-separated (default: `prefixlint "
        "introspect`'s, 1,2,4,8).",
    )
    group.addoption(
        "--prefixlint-pp",
        default=None,
        help="Pipeline sizes to build for SupportsPP models besides 1, comma-separated "
        "(default: `prefixlint introspect`'s, 2,4).",
    )
    group.addoption(
        "--prefixlint-only",
        action="append",
        default=[],
        help="Only these architectures (comma-separated, repeatable). A `module:Class` or "
        "`path/to/file.py:Class` target adds an out-of-tree model.",
    )
    group.addoption(
        "--prefixlint-timeout",
        type=float,
        default=120.0,
        help="Seconds per architecture before its build counts as hung (default: 120).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "prefixlint: a phase-2 build of one architecture (--prefixlint-zoo)"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = config.stash.get(_WORKER, None)
    if pool is not None:
        pool.close()


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """The session's collection gains one more collector, ``prefixlint``, whose tests are
    the architectures: counted, selected (-k, -m) and reported like any test."""
    report = yield
    config = collector.config
    if isinstance(collector, pytest.Session) and config.getoption("prefixlint_zoo"):
        for which in ("tp", "pp"):
            _sizes(config, which)  # a bad value is refused before any build
        targets = _targets(config)  # raised here, a pytest.UsageError ends the run (exit 4)
        if report.result is not None:
            # Its node id is its name: a child of the session would start with "::".
            zoo = Zoo.from_parent(
                collector, name="prefixlint", nodeid="prefixlint", targets=targets
            )
            report.result.append(zoo)
    return report


def _sizes(config: pytest.Config, which: str) -> list[int]:
    """The sizes given, else ``introspect``'s default grid: a test that passes has been
    built in the layouts ``prefixlint introspect`` would build (issue 30: at tp=1 only, it
    showed one finding where ``introspect`` showed all, and said nothing of the rest)."""
    value = config.getoption(f"prefixlint_{which}")
    if value is None:
        from prefixlint.introspect import DEFAULT_PP, DEFAULT_TP

        return list(DEFAULT_TP if which == "tp" else DEFAULT_PP)
    try:
        sizes = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise pytest.UsageError(
            f"--prefixlint-{which}: expected comma-separated positive integers, got {value!r}"
        )
    return sizes


def _is_target(value: str) -> bool:
    """``module:Class`` or ``file.py[:Class]``: phase 2 builds it without the registry."""
    return ":" in value or value.endswith(".py")


def _targets(config: pytest.Config) -> list[str]:
    """The architectures to test: the registry's, or those of --prefixlint-only."""
    missing = [m for m in ("torch", "vllm") if importlib.util.find_spec(m) is None]
    if missing:
        raise pytest.UsageError(
            f"--prefixlint-zoo needs {' and '.join(missing)} importable by this Python: "
            "install prefixlint into the environment that has vLLM"
        )
    only = [v.strip() for value in config.getoption("prefixlint_only") for v in value.split(",")]
    only = [v for v in only if v]
    if only and all(_is_target(v) for v in only):
        return only  # nothing to look up: the registry is not listed
    from prefixlint.introspect import DEFAULT_TIMEOUT, list_architectures

    try:
        registry = sorted(list_architectures(_worker(config), DEFAULT_TIMEOUT))
    except Exception as e:  # the worker could not even import vLLM
        raise pytest.UsageError(
            f"--prefixlint-zoo: cannot list vLLM's architectures: {e}"
        ) from None
    if not only:
        return registry
    unknown = [v for v in only if v not in registry and not _is_target(v)]
    if unknown:
        raise pytest.UsageError(
            f"--prefixlint-only: not an architecture of the installed vLLM's registry: "
            f"{', '.join(unknown)} (a `module:Class` or `file.py:Class` target is built too)"
        )
    return only


def _worker(config: pytest.Config) -> Any:
    """One phase-2 worker process for the session: vLLM is imported once, not per test.
    It is the one worker of a pool, so it ends as ``check --introspect``'s and ``zoo``'s do."""
    from prefixlint.introspect.process.pool import WorkerPool
    from prefixlint.introspect.process.warm import warm_folder

    if _WORKER not in config.stash:
        # forked from the warm zygote (PREFIXLINT_WARM_WORKER=0: a fresh one)
        config.stash[_WORKER] = WorkerPool(1, warm_folder(False))
    return config.stash[_WORKER].workers[0]


@dataclass
class Verdict:
    errors: list[Any] = field(default_factory=list)  # Diagnostics of severity error
    warnings: list[Any] = field(default_factory=list)
    # one line each, as said: a PFX600 note's own words ("not verified: ..."), kept whole
    not_verified: list[str] = field(default_factory=list)


def verdict(report: Any) -> Verdict:
    """What one phase-2 report means for its test (see the module's docstring)."""
    from prefixlint.diagnostic import Severity

    out = Verdict()
    if report.error:
        out.not_verified.append(f"not verified: phase 2 cannot load it: {report.error}")
        return out
    gaps = {r.get("arch") for r in report.results if r.get("category") in GAP_CATEGORIES}
    for d in report.diagnostics:
        if d.is_not_verified:
            out.not_verified.append(d.message)
        elif d.code == "PFX604" and d.data.get("architecture") in gaps:
            said = f"{d.message} (a gap of config synthesis or this machine)"
            out.not_verified.append(f"not verified: {said}")
        elif d.severity is Severity.ERROR:
            out.errors.append(d)
        elif d.severity is Severity.WARNING:
            out.warnings.append(d)
    for r in report.results:
        if r.get("status") == "skipped":
            why = r.get("reason") or "no reason given"
            out.not_verified.append(f"not verified: phase 2 skipped `{r.get('arch')}`: {why}")
    if not report.results and not report.diagnostics:
        out.not_verified.append("not verified: phase 2 built nothing")
    return out


def _where(d: Any) -> str:
    return f"{d.filename}:{d.location.row}: {d.code} {d.message}"


class Phase2Findings(Exception):
    """Findings of severity error: the test's failure, one line each."""


class Zoo(pytest.Collector):
    """The architectures under test, one ``ArchitectureTest`` each."""

    def __init__(self, *, targets: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.targets = targets

    def collect(self) -> list[pytest.Item]:
        return [ArchitectureTest.from_parent(self, name=t, target=t) for t in self.targets]


class ArchitectureTest(pytest.Item):
    """Phase 2 for one architecture (or target)."""

    def __init__(self, *, target: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.add_marker("prefixlint")

    def runtest(self) -> None:
        from prefixlint.introspect import introspect

        report = introspect(
            self.target,
            tp=_sizes(self.config, "tp"),
            pp=_sizes(self.config, "pp"),
            timeout=self.config.getoption("prefixlint_timeout"),
            worker=_worker(self.config),
        )
        result = verdict(report)
        for d in result.warnings:
            warnings.warn(PrefixlintWarning(_where(d)), stacklevel=1)
        if result.errors:
            lines = [_where(d) for d in result.errors]
            lines += result.not_verified
            raise Phase2Findings("\n".join(lines))
        if result.not_verified:
            pytest.skip(f"{self.target} {'; '.join(result.not_verified)}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, Phase2Findings):
            return f"phase 2 findings for {self.target}:\n{excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        from prefixlint.introspect import target_file

        return target_file(self.target), None, f"prefixlint phase 2: {self.target}"
