"""Responsiveness as the IETF draft and its clients measure it (draft-ietf-ippm-
responsiveness, Apple's networkQuality, Cloudflare's mach): the endpoints a server answers
over HTTP/2 with TLS, HTTP/1.1 and cleartext HTTP/2 (endpoints.py: what each request gets,
no sockets; server.py: the connections; tls.py: the certificate)."""
