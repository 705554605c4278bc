"""What runs inside every replica, and the contract that starts it: `launch_config.py` (the typed
launch configuration backends write and the launcher reads), `rendezvous.py` (each replica's
environment), `cgroups.py` (memory cgroups) and `launcher.py` (the shim). Imports `spec` and
`storage` of mlyard, never `server`."""
