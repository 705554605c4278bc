"""Labeling tasks on dataset versions (`tasks.py`) and their items and annotations (`items.py`)."""
