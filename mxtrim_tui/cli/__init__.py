"""``mxtrim``'s command line: ``main.py`` builds the parser and maps errors to exit codes; one
module per command holds its arguments (``register``) and its handler (``run``); the rest are
what several commands share (``arguments``, ``trim_request``, ``progress``,
``validation_run``, ``harness_text``)."""

from .main import main

__all__ = ["main"]
