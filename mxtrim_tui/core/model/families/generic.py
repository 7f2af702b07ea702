"""Fallback for architectures without a family module: stacks and kinds from tensor names.

Any ``<prefix>.layers.<i>.`` / ``<prefix>.blocks.<i>.`` / ``<prefix>.h.<i>.`` run of names is a
stack; one whose prefix mentions vision/visual is a vision stack, the longest other one is
the text backbone. Layer kinds come from the names alone (see inventory.tensor_kinds).
"""

from .base import Family

GENERIC = Family(key="generic", display="unknown architecture (kinds from tensor names)")

FAMILIES = ()
