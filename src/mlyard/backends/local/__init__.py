"""The embedded backend: replicas as processes of this machine (`processes.py`), in containers
of its engine when a job names an image (`containers/`), under OS accounts of their users
(`job_accounts.py`), on the GPUs NVML finds (`gpus.py`)."""
