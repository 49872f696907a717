"""Learning resolved incidents: the steps shared by the per-incident workflow and a batch slice."""
