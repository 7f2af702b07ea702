"""Which client reads a remote source: ``hf://`` the Hugging Face Hub's (read/remote.py),
``ms://`` ModelScope's (read/remote_modelscope.py)."""

from __future__ import annotations

from .remote import HfRepo, RangedRepo, RemoteRef


def open_repo(ref: RemoteRef) -> RangedRepo:
    """The repository ``ref`` names, through its hub's client."""
    if ref.scheme == "ms":
        from .remote_modelscope import MsRepo

        return MsRepo(ref)
    return HfRepo(ref)
