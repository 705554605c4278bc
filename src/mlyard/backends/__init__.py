"""Backends run replicas: `local` (processes on this machine) and `kubernetes` (pods)."""
