"""Which aggregator each of a worker's window positions claims: a hash, re-salted, re-pointed.

Sequence s of a job uses position s mod W; the position's aggregator index is CRC-32 of
(app_id, position, salt) modulo the pool size, the salt raised until no earlier position of
the same job has that index (so a job never collides with itself). Jobs meet only where their
hashes do. A PS result flagged as a collision re-points the position to the index it names,
and the map keeps it for the job's later sequences and all-reduces. Every worker of a job
computes the same map, so their packets for a sequence meet in one aggregator.
"""

from __future__ import annotations

import struct
import zlib

from protocol.atp import params

HASH_KEY = struct.Struct("!HII")


class AggregatorMap:
    """Position -> aggregator index for one job's worker (W positions in a pool of ``pool_size``)."""

    def __init__(self, app_id: int, positions: int, pool_size: int) -> None:
        if not 1 <= positions <= pool_size:
            raise ValueError(f"ATP needs 1 <= window positions ({positions}) <= aggregators ({pool_size})")
        if not 1 <= pool_size <= params.MAX_POOL_SIZE:
            raise ValueError(f"ATP pool size must be 1..{params.MAX_POOL_SIZE}, got {pool_size}")
        self.pool_size = pool_size
        self.indices: list[int] = []
        used: set[int] = set()
        for position in range(positions):
            salt = 0
            while (index := zlib.crc32(HASH_KEY.pack(app_id, position, salt)) % pool_size) in used:
                salt += 1
            used.add(index)
            self.indices.append(index)
        self._used = used

    @property
    def positions(self) -> int:
        return len(self.indices)

    def index(self, packet: int) -> int:
        """The aggregator the job's packet number ``packet`` (its sequence, 0-based) claims."""
        return self.indices[packet % len(self.indices)]

    def adopt(self, packet: int, new_index: int) -> bool:
        """Re-point the position of ``packet`` to ``new_index`` unless it is out of the pool or
        another position of the job holds it; returns whether it moved."""
        if new_index >= self.pool_size or new_index in self._used:
            return False
        position = packet % len(self.indices)
        self._used.discard(self.indices[position])
        self._used.add(new_index)
        self.indices[position] = new_index
        return True

    def repoint(self, indices: list[int]) -> None:
        """Take ``indices`` (a position's index each, distinct, within the pool: what the native
        worker's ``adopt`` left) as the map's."""
        if len(indices) != len(self.indices) or len(set(indices)) != len(indices) or not all(0 <= i < self.pool_size for i in indices):
            raise ValueError(f"not a map of {len(self.indices)} distinct positions in a pool of {self.pool_size}")
        self.indices = list(indices)
        self._used = set(indices)
