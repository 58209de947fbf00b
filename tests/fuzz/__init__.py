"""Property-based fuzzing of every RPC against a real server process (hypothesis)."""
