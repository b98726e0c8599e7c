"""SwitchMLEgress: per-rank result addressing, flood pruning, drop simulator, counters.

``rank_addr_table`` maps a (job, rank) to the MAC/IPv4/UDP port its result copy is sent to.
Since a result's address headers depend only on the update's address headers, the job and
the rank, the egress keeps a cache of finished headers (IPv4 checksum included) per update
header; any change to the table empties it.
"""

from __future__ import annotations

from protocol.switchml import params
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.parser import result_address_headers
from switches.embedded.registers import CellRegister, Counter
from switches.embedded.tables import ExactMatchTable, Field

NAME = "SwitchMLEgress"
EGV_SENT = params.P4_CONSTANTS["EGV_SENT"]
EGV_DROP_SIM_EGRESS = params.P4_CONSTANTS["EGV_DROP_SIM_EGRESS"]
TEMPLATE_CACHE_LIMIT = 4096
"""Distinct update headers remembered; beyond this the cache restarts (bounded memory)."""


class SwitchMLEgress:
    def __init__(self, drop_simulator: DropSimulator) -> None:
        self._drop_simulator = drop_simulator
        self.rank_addr_table = ExactMatchTable(
            f"{NAME}.rank_addr_table",
            [Field("meta.job_id", 16), Field("meta.dst_rank", 8)],
            {"set_rank_addr": [Field("mac", 48), Field("ipv4", 32), Field("udp_port", 16)], "drop": []},
            default="drop",
            size=params.P4_CONSTANTS["SWITCHML_RANK_ADDR_TABLE_SIZE"],
        )
        self.rank_addr_table.on_change = self._forget_templates
        self.egress_drop_threshold = CellRegister(f"{NAME}.egress_drop_threshold", 1)
        self.egress_counter = Counter(f"{NAME}.egress_counter", len(params.EGRESS_EVENTS))
        self._templates: dict[bytes, dict[tuple[int, int], bytes | None]] = {}

    def _forget_templates(self) -> None:
        self._templates.clear()

    def result_headers(self, update_headers: bytes, job_id: int, rank: int) -> bytes | None:
        """The result's Ethernet/IPv4/UDP headers for ``rank`` of ``job_id``; None on a table miss (drop)."""
        per_rank = self._templates.get(update_headers)
        if per_rank is None:
            if len(self._templates) >= TEMPLATE_CACHE_LIMIT:
                self._templates.clear()
            per_rank = self._templates[update_headers] = {}
        key = (job_id, rank)
        try:
            return per_rank[key]
        except KeyError:
            headers = per_rank[key] = self._build(update_headers, key)
            return headers

    def _build(self, update_headers: bytes, key: tuple[int, int]) -> bytes | None:
        action, action_params = self.rank_addr_table.lookup(key)
        if action != "set_rank_addr":
            return None
        mac, ipv4, udp_port = action_params
        return result_address_headers(update_headers, mac, ipv4, udp_port)

    def admit(self, length: int) -> bool:
        """Drop simulator (egress) and egress_counter for one departing copy."""
        threshold = self.egress_drop_threshold.cells[0]
        if threshold and self._drop_simulator.drops(threshold):
            self.egress_counter.count(EGV_DROP_SIM_EGRESS, length)
            return False
        counter = self.egress_counter
        counter.packets[EGV_SENT] += 1  # counter.count() inlined: every departing frame
        counter.bytes[EGV_SENT] += length
        return True

    def registers(self) -> list[CellRegister]:
        return [self.egress_drop_threshold]

