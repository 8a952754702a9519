"""Transports: moving bytes fast. They know sockets, not protocols."""
