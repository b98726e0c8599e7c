/*
 * egress.p4 -- SwitchMLEgress: address each result copy to its rank and cut it to a
 * result's size, prune flood echoes, and simulate loss on the link out of the switch
 * (docs/dataplane.md, SwitchMLEgress).
 */
#ifndef SWITCHML_EGRESS_P4
#define SWITCHML_EGRESS_P4

#include "headers.p4"

/* standard_metadata.instance_type of a copy made by the multicast engine (bmv2's
 * PKT_INSTANCE_TYPE_REPLICATION). */
#define INSTANCE_TYPE_REPLICATION 5


control SwitchMLEgress(inout headers_t hdr,
                       inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {

    /* Like SwitchMLIngress.ingress_drop_threshold, for the outgoing link. */
    register<bit<32>>(1) egress_drop_threshold;
    /* Packets leaving / dropped by the simulator, indexed by the EGV_* constants. */
    counter(EGV_COUNT, CounterType.packets_and_bytes) egress_counter;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    /* Results leave with the worker's own addresses, so its socket accepts them. Keyed by
     * the job too: every job on the switch has its own ranks 0..n-1. */
    action set_rank_addr(mac_addr_t mac, ipv4_addr_t ipv4, bit<16> udp_port) {
        hdr.ethernet.dstAddr = mac;
        hdr.ipv4.dstAddr = ipv4;
        hdr.udp.dstPort = udp_port;
    }

    table rank_addr_table {
        key = {
            meta.job_id: exact;
            meta.dst_rank: exact;
        }
        actions = { set_rank_addr; drop; }
        default_action = drop();
        size = SWITCHML_RANK_ADDR_TABLE_SIZE;
    }

    apply {
        bool dropped = false;

        if (meta.is_result == 1) {
            /* 1. A multicast copy's rank is its replication id (one node per rank, rid =
             * rank); a unicast result already carries meta.dst_rank from ingress. */
            if (standard_metadata.instance_type == INSTANCE_TYPE_REPLICATION) {
                meta.dst_rank = (bit<8>)standard_metadata.egress_rid;
            }
            if (!rank_addr_table.apply().hit) {
                dropped = true;
            }
            /* Bytes after the k elements (a trailer outside the IP packet) are not part
             * of the result. Here, per copy: bmv2 does not carry a truncation made in
             * ingress over to multicast replicas (it clones the packet's data only). */
            truncate((bit<32>)SWITCHML_FRAME_BYTES);
        } else if (standard_metadata.instance_type == INSTANCE_TYPE_REPLICATION
                       && standard_metadata.egress_port == meta.ingress_port) {
            /* 2. A flooded copy back out of the port it came in on. */
            mark_to_drop(standard_metadata);
            dropped = true;
        }

        /* 3. Drop simulator for everything that would otherwise leave. */
        if (!dropped) {
            bit<32> egress_threshold;
            egress_drop_threshold.read(egress_threshold, 0);
            random(meta.drop_draw, (bit<32>)0, (bit<32>)0xFFFFFFFE);
            if (meta.drop_draw < egress_threshold) {
                mark_to_drop(standard_metadata);
                egress_counter.count(EGV_DROP_SIM_EGRESS);
            } else {
                egress_counter.count(EGV_SENT);
            }
        }
    }
}

#endif
