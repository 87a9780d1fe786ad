"""Ingestion: the store use case (``usecase``), drafting a request (``draft``), the duplicate
check with its scope and threshold (``dedup``), facts against their subject (``facts``) and
procedure versions (``procedural``)."""
