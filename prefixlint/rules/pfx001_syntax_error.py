"""PFX001 syntax-error."""

from __future__ import annotations

from prefixlint.static.rule import Invalid, LintRule


class SyntaxErrorRule(LintRule):
    """
    ## What it does
    Reports a file that cannot be read, decoded (not UTF-8 or its declared encoding, null
    bytes) or parsed, at the position where reading stopped. The run continues with the
    other files. Two cases are notes ("not checked"), not errors, since the file may be
    fine: syntax of a newer Python than the one running prefixlint (the note names the
    version), and a file over `max-file-size` (default 1 MB) in `[tool.prefixlint]`.
    Notes fail a run only with `--strict`.

    ## Why is this bad?
    Nothing else can be checked in such a file; and vLLM would fail to import it at
    start-up, for every architecture registered in the same module.

    ## Example
    ```python
    class Model(nn.Module:
        ...
    ```

    Use instead:
    ```python
    class Model(nn.Module):
        ...
    ```
    """

    code = "PFX001"

    VALID = ["x = 1\n", "", "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n"]
    INVALID = [
        Invalid("class Model(nn.Module:\n    pass\n", line=1, contains="syntax error"),
        Invalid("def f():\n    return (\n", line=2),
        Invalid("x = 1\n\x00\n", contains="null"),
    ]
