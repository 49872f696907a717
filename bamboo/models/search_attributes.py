"""Custom search attributes: how Temporal Web and any client find runs without state of their own.

Names and types are compatibility data; the dev server registers them at start-up and a cluster
operator registers the same with `temporal operator search-attribute create`.
"""

SEARCH_ATTRIBUTES: dict[str, str] = {
    "BambooKind": "Keyword",  # accumulate | populate | analyze | investigate
    "BambooTaskId": "Int",  # PanDA jediTaskID the run is about
    "BambooBatchId": "Keyword",  # populate / batch-analyze batch id
    "BambooAwaitingApproval": "Bool",  # an investigation waits for an operator decision
}
