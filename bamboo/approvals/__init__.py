"""Operator identity in practice: local signing keys (``keys``) and the deployment's registry (``registry``)."""
