/*
 * egress.p4 -- ATPEgress: flood echoes pruned, the drop simulator, each worker's copy of a PS
 * result addressed to it, ECN marked from the egress queue's depth, departures counted
 * (docs/dataplane-atp.md, ATPEgress).
 *
 * ECN comes from the queue bmv2 really has: standard_metadata.deq_qdepth, the packets left
 * in this port's egress queue when the copy was dequeued. bmv2 queues a port's packets only
 * where a queue rate is set (ATPBmv2Control.set_port_queue in switches/bmv2/atp/control.py,
 * at the rate packets_per_second gives for the port's link); without one they leave at once
 * and the depth stays near 0.
 */
#ifndef ATP_EGRESS_P4
#define ATP_EGRESS_P4

#include "headers.p4"

#define IPV4_ECN_CE 0x03

control ATPEgress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

    /* Queue depth (packets) at which an ATP packet is marked; 0 turns marking off. */
    register<bit<32>>(1) ecn_threshold;
    /* Copies leaving / marked / dropped by the simulator, indexed by the EGV_* constants. */
    counter(EGV_COUNT, CounterType.packets_and_bytes) egress_counter;
    /* Like ATPIngress.ingress_drop_threshold, for the link out of the switch. */
    register<bit<32>>(1) egress_drop_threshold;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    /* A result copy leaves from the address the PS sent it to (the switch's) to the
     * worker's, with UDP checksum 0, as SwitchML's results do. */
    action set_worker_addr(mac_addr_t mac, ipv4_addr_t ipv4, bit<16> udp_port) {
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = mac;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = ipv4;
        hdr.udp.srcPort = hdr.udp.dstPort;
        hdr.udp.dstPort = udp_port;
        hdr.udp.checksum = 0;
    }

    /* Keyed by the job and the copy's replication id (the worker id: one node per worker). */
    table worker_addr_table {
        key = {
            meta.app_id: exact;
            standard_metadata.egress_rid: exact;
        }
        actions = { set_worker_addr; drop; }
        default_action = drop();
        size = ATP_WORKER_ADDR_TABLE_SIZE;
    }

    apply {
        bool dropped = false;
        if (meta.is_flood == 1 && standard_metadata.egress_port == meta.ingress_port) {
            /* A flooded copy back out of the port it came in on: never made. */
            drop();
            dropped = true;
        } else {
            /* The drop simulator, first, for every copy (before worker_addr_table, as on
             * every ATP target: docs/dataplane-atp.md). */
            bit<32> egress_threshold;
            egress_drop_threshold.read(egress_threshold, 0);
            random(meta.drop_draw, (bit<32>)0, (bit<32>)0xFFFFFFFE);
            if (meta.drop_draw < egress_threshold) {
                drop();
                egress_counter.count(EGV_DROP_SIM_EGRESS);
                dropped = true;
            } else if (meta.is_result == 1 && !worker_addr_table.apply().hit) {
                dropped = true;
            }
        }
        if (!dropped) {
            bit<32> threshold;
            ecn_threshold.read(threshold, 0);
            if (meta.is_atp == 1 && threshold != 0 && (bit<32>)standard_metadata.deq_qdepth >= threshold) {
                hdr.atp.flags = hdr.atp.flags | ATP_FLAG_ECN;
                hdr.ipv4.diffserv = hdr.ipv4.diffserv | IPV4_ECN_CE;
                egress_counter.count(EGV_ECN_MARKED);
            }
            egress_counter.count(EGV_SENT);
        }
    }
}

#endif
