"""fastreplay past one machine, on Ray (``pip install 'fastreplay[ray]'``).

A ``ShardedServer`` runs every table as ``num_shards`` Ray actors (shards),
each one in-process ``fastreplay.Server``.  Its ``Client`` (picklable: use it
in tasks and actors) keeps Reverb's client API across the shards:

- writers are bound to one shard (on the caller's node when there is one,
  reached through shared memory; other nodes through Ray calls);
- ``sample_batch`` is globally exact: item *i* of shard *s* is drawn with
  probability ``p_i**alpha / sum over all shards``, and ``info`` reports the
  global probability and size, so importance weights are exact;
  ``sample_batches`` (a fastreplay addition, what ``dataset`` workers use)
  draws several such batches from one request per shard;
- item keys carry their shard in their top 8 bits (``shard_of``), so
  ``update_priorities`` goes straight to the shard, asynchronously and in
  order per shard;
- shards restart (Ray ``max_restarts``) from their newest checkpoint; a
  writer of a dead shard raises ``ShardUnavailableError``; sampling skips
  dead shards with exact probabilities for the draw made.

Ray is imported only by this package, never by ``import fastreplay``.
"""

from __future__ import annotations

from fastreplay.errors import ShardUnavailableError
from fastreplay.ray._client import Client, shard_of
from fastreplay.ray._info import ShardInfo
from fastreplay.ray._sampling import ShardedSampleInfo
from fastreplay.ray._server import ShardedServer, connect
from fastreplay.ray._writers import ShardWriter

__all__ = ["Client", "ShardInfo", "ShardUnavailableError", "ShardWriter",
           "ShardedSampleInfo", "ShardedServer", "connect", "shard_of"]
