"""The transport between a ``Server`` and clients of other processes and
machines: the wire format (``wire``), what the server runs per connection
(``service``) and the client's backend (``remote``)."""
