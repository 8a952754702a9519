"""Captures analysed: packets.py reads a file, tcp.py and udp.py judge its flows (pure
functions of the packets), text.py prints them."""
