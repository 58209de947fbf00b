"""What the composition root (service/runtime.py, service/server.py) applies: the security
chain built from its settings, and the observability wrappers around the agent's model, the
stores and the servicers. It sits above api, so that no lower layer imports an upper one."""
