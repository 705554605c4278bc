"""Annotations of a dataset version's files: the label formats they are imported from and
exported to (`formats/`), and how far annotators agree (`agreement.py`). Pure functions over
paths and bytes: the server reads the files and stores what comes out.
"""

from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels

__all__ = ["Annotations", "Box", "FormatError", "ItemLabels"]
