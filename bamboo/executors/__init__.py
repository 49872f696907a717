"""Remote executors: one Temporal worker per (environment, channel) that runs approved command tools."""
