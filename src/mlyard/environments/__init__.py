"""Environments: a base image plus apt and pip packages, built once per distinct content.

With a container engine an environment is an image (`image.py`, the engine's build API);
without one it is a virtualenv on the server's Python (`virtualenv.py`), where apt packages
and the base image cannot apply. `builds.py` runs the builds on the leading server.
"""

from mlyard.environments.containerfile import containerfile
from mlyard.environments.virtualenv import VirtualenvBuilder

__all__ = ["VirtualenvBuilder", "containerfile"]
