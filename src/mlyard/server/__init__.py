"""The mlyard server: HTTP API, database, controller loop and authentication."""
