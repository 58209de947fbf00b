"""Embedders and the Qdrant-backed vector store."""
