"""Matching names and values: entity resolution (``entities``), predicate normalization
(``predicates``), when two look-alike names are different things (``names``) and the
distinguishing tokens every matching rule asks (``distinguishing``)."""
