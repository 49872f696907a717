"""Batch control shared by the populate and analyze batches (see `contract.py`)."""
