from tests.processes import free_port, server_process  # noqa: F401 (tests/observability/test_export.py)
