"""Command tools: declared executables run from an argv, under the fail-closed rules of ``policy.commands``.

``config`` loads the declaration file, ``credentials`` builds the child's clean environment with exactly one
credential family, and ``runner`` executes a matched command without a shell and scrubs what it printed.
Import the submodules directly; this package stays light.
"""
