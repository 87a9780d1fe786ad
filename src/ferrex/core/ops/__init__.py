"""Operator work: ``doctor``, ``rebuild``, export and import (``transfer``, its file format in
``export_format``), getting a store ready to serve (``readiness``), and the stats tool
(``stats``)."""
