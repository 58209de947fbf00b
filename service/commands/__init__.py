"""Subcommands of the ``ragagent`` CLI, one module each.

Each module has ``register(subparsers)``, which adds its parser and sets ``run`` (a
coroutine function taking the parsed arguments and returning the exit code) as default.
"""
