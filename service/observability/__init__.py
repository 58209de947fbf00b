"""Logging, request ids and access logs."""
