"""Backends run replicas: `local` (processes on this machine); Kubernetes comes later."""
