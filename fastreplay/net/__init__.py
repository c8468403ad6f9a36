"""The transport between a ``Server`` and clients of other processes and
machines: the wire format (``wire``, ``codec``), what the server runs per
connection (``service``), the client's backend (``remote``) and the thread
that ships its writers' items (``outbox``)."""
