"""The errors of topology and experiment files, apart so that every part of the model can raise
them."""

from .datafiles import DataFileError


class TopologyError(DataFileError):
    """A mistake in a topology; the message names where it is."""


class ExperimentError(DataFileError):
    """A mistake in an experiment file; the message names the step and field."""
