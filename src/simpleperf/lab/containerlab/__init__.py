"""Labs that move past one machine: containerlab topologies (and clabernetes' Topology
resources wrapping them) written from ours, and containerlab topologies of `linux` nodes
read back into ours so that `lab up` builds them in namespaces without Docker.

Both directions are pure: they turn text into text; the commands write and read files.
"""
