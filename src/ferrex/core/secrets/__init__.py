"""Secrets in what agents store: the scanner (``scanner``, its patterns in ``patterns``), the
fields of a memory it screens (``fields``), and the sweep over what is already stored
(``sweep``). docs/secrets.md."""
