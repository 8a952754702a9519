"""The results' one error, apart from the store so that commands can catch it cheaply."""


class ResultsError(Exception):
    """Results that cannot be written or read; the message is one line for the user."""
