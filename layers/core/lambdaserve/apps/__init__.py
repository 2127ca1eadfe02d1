"""FastAPI apps: inference and management."""
