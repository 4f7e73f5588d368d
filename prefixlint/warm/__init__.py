"""Warm processes: a zygote that has done a command's imports once forks one child per call
(``zygote.py``, the caller's side in ``client.py``). Two kinds use it: phase 2's worker
(``prefixlint/introspect/process/forked.py``: torch and vLLM imported) and the command line
itself for ``check`` (``cli.py``: libcst and the rules imported). Standard library only."""
