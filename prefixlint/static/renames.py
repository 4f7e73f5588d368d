"""What renames one checkpoint name to another: a ``WeightsMapper``'s entries (vLLM
applies them to the quantization config too) and the renames of weight-loading code
(``.replace``, dict tables, tuples of names, a prefix stripped with ``startswith``), in one
file or across the files of a package that load weights."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

_LOADER_FUNCTION = re.compile(r"load|weight|rename|remap|map", re.I)


@dataclass(frozen=True)
class Renames:
    """String pairs that rename a checkpoint name: a ``WeightsMapper``'s entries (applied to
    quantization configs too) and the renames of weight-loading code."""

    mapper: tuple[tuple[str, str], ...]
    loader: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, text: str) -> Renames:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return cls((), ())
        mapper: list[tuple[str, str]] = []
        loader: list[tuple[str, str]] = []
        loads = False
        mappers = _mapper_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) in mappers:
                for kw in node.keywords:
                    mapper.extend(_dict_pairs(kw.value))
            elif isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)
            ) and _LOADER_FUNCTION.search(node.name):
                loads = True
                loader.extend(_loader_pairs(node))
        if loads:  # tables of names at the top of a file that loads weights
            for stmt in tree.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                    loader.extend(_dict_pairs(stmt.value))
        return cls(tuple(mapper), tuple(loader))

    def mapper_maps(self, got: str, path: str) -> tuple[str, str] | None:
        """A ``WeightsMapper`` entry that turns the prefix's name into the attribute's:
        applied to the whole relative name (``language_model.model`` -> ``language_model``),
        else one that names the two differing parts (``.conv.`` -> ``.short_conv.``)."""
        old, new = differing(got, path)
        dotted_got, dotted_path = f".{got}.", f".{path}."
        for a, b in self.mapper:
            if a and a in dotted_got and dotted_got.replace(a, b, 1) == dotted_path:
                return a, b
        if not old or not new:
            return None
        for a, b in self.mapper:
            if has_word(a, old) and has_word(b, new) and not has_word(b, old):
                return a, b
        return None

    def mapper_renames_into(self, name: str) -> tuple[str, str] | None:
        """A ``WeightsMapper`` entry that renames a checkpoint name into ``name`` (``"model."``
        -> ``"token2wav_model."``): vLLM maps the quantization config with it too, so its
        lookups use ``name``."""
        for a, b in self.mapper:
            if has_word(b, name) and not has_word(a, name):
                return a, b
        return None

    def loader_maps(self, one: str, other: str) -> tuple[str, str] | None:
        """A rename in weight-loading code between the two names, either way; a name
        against nothing when the code strips it (``name[len("text_model."):]``)."""
        if not one and not other:
            return None
        if not one or not other:
            kept = one or other
            for a, b in self.loader:
                if not b and has_word(a, kept):
                    return a, b
            return None
        for a, b in self.loader:
            if (has_word(a, one) and has_word(b, other)) or (
                has_word(a, other) and has_word(b, one)
            ):
                return a, b
        return None


def _mapper_names(tree: ast.AST) -> frozenset[str]:
    """The names ``WeightsMapper`` goes by in the file, aliases included (vllm-omni's
    ``import WeightsMapper as _Vllm_WeightsMapper``)."""
    names = {"WeightsMapper"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(a.asname for a in node.names if a.name == "WeightsMapper" and a.asname)
    return frozenset(names)


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def _const(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # f"layers.{i}.mixer." -> "layers.*.mixer."
        return "".join(_const(v) or "*" for v in node.values)
    return None


def _dict_pairs(node: ast.AST) -> Iterator[tuple[str, str]]:
    if isinstance(node, ast.Dict):
        items = zip(node.keys, node.values, strict=True)
    elif isinstance(node, ast.DictComp):
        items = iter([(node.key, node.value)])
    else:
        return
    for k, v in items:
        key = _const(k)
        value = _const(v.elts[0] if isinstance(v, ast.Tuple) and v.elts else v)
        if key is not None and value is not None:
            yield key, value


def _loader_pairs(fn: ast.AST) -> Iterator[tuple[str, str]]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _call_name(node) == "replace" and len(node.args) >= 2:
            a, b = _const(node.args[0]), _const(node.args[1])
            if a is not None and b is not None:
                yield a, b
        elif (
            isinstance(node, ast.Call)
            and _call_name(node) in ("startswith", "removeprefix")
            and len(node.args) == 1
        ):
            a = _const(node.args[0])
            if a:  # a prefix the loader strips (``name[len(a):]``, ``removeprefix(a)``)
                yield a, ""
        elif isinstance(node, ast.Tuple):
            texts = [t for t in (_const(e) for e in node.elts) if t is not None]
            yield from ((texts[i], texts[j]) for i in range(len(texts)) for j in range(i))
        elif isinstance(node, (ast.Dict, ast.DictComp)):
            yield from _dict_pairs(node)


def has_word(text: str, name: str) -> bool:
    """``name`` stands in ``text`` as whole dotted segments (``conv`` in ``.conv.``)."""
    return bool(name) and re.search(rf"(^|[^\w]){re.escape(name)}($|[^\w])", text) is not None


def package_renames(texts: Iterator[str]) -> tuple[tuple[str, str], ...]:
    """The weight-loading renames of every file of a package that loads weights (a
    plugin's backbone is often loaded by another file: vllm-factory's T5 encoder, whose
    names its GLiNER head maps)."""
    out: dict[tuple[str, str], None] = {}
    for text in texts:
        for pair in Renames.of(text).loader:
            out.setdefault(pair, None)
    return tuple(out)


def differing(got: str, path: str) -> tuple[str, str]:
    """The parts of a relative prefix and of the attribute path that differ (common leading
    and trailing segments dropped, indices too): ``("conv", "short_conv")``."""
    g, w = got.split("."), path.split(".")
    while g and w and g[-1] == w[-1]:
        g, w = g[:-1], w[:-1]
    while g and w and g[0] == w[0]:
        g, w = g[1:], w[1:]
    return ".".join(x for x in g if x != "{*}"), ".".join(x for x in w if x != "{*}")
