"""Ingestion: the store use case (``usecase``), drafting a request (``draft``), the duplicate
check with its scope and threshold (``dedup``), facts against their subject (``facts``, the
conflict rules in ``conflict``) and procedure versions (``versioning``, the rules in
``procedures``)."""
