"""Phase 1: the static checker. Pure libcst and ``ast``; never imports the linted code,
torch or vLLM.

- ``index``: an ``ast`` summary of each module (classes, signatures, imports), cached.
- ``resolve``: names to classes and signatures across modules (the linted package, vLLM).
- ``source``: decoding and the libcst *sketch* of the parts of a file the rules need.
- ``walk`` / ``prefix_sites``: the one walk every rule shares, and the symbolic evaluation
  of each ``prefix=`` argument against the attribute path the module is stored at.
- ``rule``: the ``LintRule`` base class and the per-file context rules read.
- ``engine``: one file through the rules, to ``Diagnostic`` (positions, fixes, ``noqa``).
- ``runner``: many files, in parallel, with the result cache (``cache``).
- ``fix``: applies the fixes that findings carry (``--fix`` / ``--diff``).
"""
