"""Labelled PanDA incidents: the synthetic generator and its cause catalogue."""

from bamboo.samples.generator import cause_families, generate_incidents, read_incidents, write_incidents

__all__ = ["cause_families", "generate_incidents", "read_incidents", "write_incidents"]
