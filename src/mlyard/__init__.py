"""mlyard: queue, gang-schedule and run deep-learning training jobs on shared machines."""

__version__ = "0.1.0"
