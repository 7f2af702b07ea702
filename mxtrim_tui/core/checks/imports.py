"""torch and transformers, imported only where a check asks for them.

mxtrim runs without both (a tool install has neither): every check against transformers then
says, in one sentence, what was skipped and how to enable it.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager


def import_torch_transformers():
    """(torch, transformers, None), or (None, None, why the checks cannot run and how to
    enable them) when either is not installed beside mxtrim."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
            import transformers
    except ImportError as exc:
        return None, None, checks_unavailable(exc.name)
    return torch, transformers, None


def checks_unavailable(missing: str | None) -> str:
    """The one sentence every skipped transformers check gives when torch / transformers are
    missing (a tool install of mxtrim has neither)."""
    return (f"{missing or 'torch / transformers'} is not installed in the interpreter that judges ({sys.executable}); "
            "to enable the checks against "
            "transformers: pip install 'mxtrim-tui[checks]' (or install mxtrim into the environment that has vLLM)")


@contextmanager
def quiet_transformers():
    """transformers' warnings, log lines and progress bars silenced, restored afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
