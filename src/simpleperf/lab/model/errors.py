"""The one error a topology can raise, apart so that every part of the model can raise it."""

from .datafiles import DataFileError


class TopologyError(DataFileError):
    """A mistake in a topology; the message names where it is."""
