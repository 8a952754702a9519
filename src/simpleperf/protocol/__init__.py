"""Wire protocols as pure byte <-> message translators. Nothing here touches a socket."""
