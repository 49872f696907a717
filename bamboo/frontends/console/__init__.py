"""``bamboo console``: the web console for reviews, sessions, grants, batches and the audit chain."""
