"""PanDA integration: the HTTP client, the built-in tools, and a simulator for demos and tests."""
