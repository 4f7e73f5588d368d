"""The ``prefixlint`` commands, one module each (``prefixlint/cli.py`` is the group that
imports a command's module only when it runs); ``common`` and ``lint`` hold what several
commands share."""
