"""Operations on a pipeline beside running it: replay, rescale, savepoints, queryable
state and topic hygiene. The runners start epochs these prepare; the ``flamepipe``
command reaches each of them (docs/operations.md).

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
