"""Fakes of external services that speak their real wire protocols on loopback."""
