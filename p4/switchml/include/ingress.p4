/*
 * ingress.p4 -- SwitchMLIngress: drop simulator, L2 forwarding, worker table and the
 * aggregation of one slot version (docs/dataplane.md, SwitchMLIngress, steps 1-6).
 *
 * Register cells are indexed by meta.reg_index = shadow_set * SWITCHML_MAX_POOL_SIZE +
 * slot_base + slot (the "version" of a slot of the sender's job, whose slots start at
 * slot_base); meta.other_index is the same slot in the other shadow set.
 */
#ifndef SWITCHML_INGRESS_P4
#define SWITCHML_INGRESS_P4

#include "headers.p4"

/* udp.length of a well-formed update: UDP header (8) + switchml_h + k int32. */
#define SWITCHML_UDP_LENGTH (8 + SWITCHML_HEADER_BYTES + 4 * SWITCHML_K)

control SwitchMLIngress(inout headers_t hdr,
                        inout metadata_t meta,
                        inout standard_metadata_t standard_metadata) {

    /* ---- state ------------------------------------------------------------------- */

    /* Drop probability p as round(p * (2^32 - 1)): a draw in [0, 2^32 - 2] below it drops. */
    register<bit<32>>(1) ingress_drop_threshold;
    /* What happened to each packet, indexed by the EV_* constants. */
    counter(EV_COUNT, CounterType.packets_and_bytes) event_counter;

    /* Per slot version: ranks that contributed, how many, the max exponent (int8 in the
     * low byte), and the seq of the version the cell holds (the stale-update guard). */
    register<bit<32>>(2 * SWITCHML_MAX_POOL_SIZE) bitmap;
    register<bit<32>>(2 * SWITCHML_MAX_POOL_SIZE) count;
    register<bit<32>>(2 * SWITCHML_MAX_POOL_SIZE) exponent;
    register<bit<32>>(2 * SWITCHML_MAX_POOL_SIZE) seq;

    /* value_00 .. value_<k-1> and the actions store_first_values / add_values / read_values,
     * generated for the build's k (see headers.p4 on the angle brackets). */
#include <elements.p4>
#if SWITCHML_ELEMENTS_K != SWITCHML_K
#error "elements.p4 was generated for another k than SWITCHML_K: run p4/switchml/gen_elements.py --k K"
#endif

    /* The sender's result multicast group, set by worker_table (metadata_t has no field
     * for it because egress never needs it). Read only after set_worker ran; the
     * initialiser keeps p4c from warning that it may be read uninitialised. */
    bit<16> result_mcast_grp = 0;

    /* ---- L2 forwarding of ordinary traffic ------------------------------------------ */

    action l2_learn() {
        /* A learning controller answers with l2_learn_table (NoAction) and l2_table entries,
         * or, when a table is full, counts the frame (EV_L2_NOT_LEARNED, with its length). */
        digest<l2_learn_digest_t>(1, { hdr.ethernet.srcAddr, standard_metadata.ingress_port,
                                       standard_metadata.packet_length });
    }

    table l2_learn_table {
        key = { hdr.ethernet.srcAddr: exact; }
        actions = { NoAction; l2_learn; }
        default_action = l2_learn();
        size = SWITCHML_L2_TABLE_SIZE;
    }

    action l2_forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    action l2_flood() {
        /* One node (rid 0) with every port; SwitchMLEgress prunes the copy to the ingress port. */
        standard_metadata.mcast_grp = SWITCHML_FLOOD_MCAST_GRP;
    }

    table l2_table {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { l2_forward; l2_flood; }
        default_action = l2_flood();
        size = SWITCHML_L2_TABLE_SIZE;
    }

    /* ---- the switch's own address: ARP and ICMP echo ---------------------------------- */

    /* Set by switch_addr_table: the switch's MAC for the address asked for. */
    mac_addr_t switch_mac = 0;

    action set_switch_mac(mac_addr_t mac) {
        switch_mac = mac;
    }

    /* The switch's IPv4 addresses (the control plane programs them: protocol/params.py's
     * SWITCH_IPV4 for the aggregator), each with its MAC. Default NoAction: not ours. */
    table switch_addr_table {
        key = { meta.target_ipv4: exact; }
        actions = { set_switch_mac; NoAction; }
        default_action = NoAction();
        size = SWITCHML_SWITCH_ADDR_TABLE_SIZE;
    }

    /* The request becomes its reply in place, out of the port it came in on: sender = the
     * switch, target = the requester (trailing bytes, e.g. padding, stay as they were). */
    action arp_reply() {
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = switch_mac;
        hdr.arp.oper = SWITCHML_ARP_REPLY;
        hdr.arp.tha = hdr.arp.sha;
        hdr.arp.tpa = hdr.arp.spa;
        hdr.arp.sha = switch_mac;
        hdr.arp.spa = meta.target_ipv4;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }

    /* Echo request -> echo reply in place: addresses swapped (from the switch's MAC), type
     * 0, the ICMP checksum updated for the type's change (RFC 1624 eqn. 3: ~(~HC + ~m + m')
     * with m = 0x0800, the old type and code, and m' = 0x0000); SwitchMLComputeChecksum
     * recomputes the IPv4 one. */
    action icmp_echo_reply() {
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = switch_mac;
        hdr.ipv4.dstAddr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = meta.target_ipv4;
        hdr.icmp.type = SWITCHML_ICMP_ECHO_REPLY;
        bit<32> sum = (bit<32>)(~hdr.icmp.checksum) + 32w0xF7FF;
        sum = (sum & 0xFFFF) + (sum >> 16);
        hdr.icmp.checksum = ~(bit<16>)sum;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }

    /* ---- who sent this update -------------------------------------------------------- */

    /* A job's workers share its job_id, result group and slot range (slot_base, pool_size):
     * several jobs on one switch never touch each other's cells or workers. */
    action set_worker(bit<8> rank, bit<16> job_id, bit<8> num_workers, bit<16> mcast_grp,
                      bit<16> slot_base, bit<16> pool_size) {
        meta.rank = rank;
        meta.rank_bit = (bit<32>)1 << rank;
        meta.job_id = job_id;
        meta.num_workers = num_workers;
        meta.slot_base = slot_base;
        meta.pool_size = pool_size;
        result_mcast_grp = mcast_grp;
    }

    /* Default on a switch that only carries SwitchML traffic through (pass-through). */
    action forward_as_ordinary() { }

    action drop_unknown_sender() {
        mark_to_drop(standard_metadata);
        event_counter.count(EV_DROP_UNKNOWN_SENDER);
    }

    /* The rank comes from where the packet entered and who sent it, never from the header. */
    table worker_table {
        key = {
            standard_metadata.ingress_port: exact;
            hdr.ipv4.srcAddr: exact;
        }
        actions = { set_worker; forward_as_ordinary; drop_unknown_sender; }
        default_action = drop_unknown_sender();
        size = SWITCHML_WORKER_TABLE_SIZE;
    }

    /* ---- the switch above (hierarchical aggregation) ------------------------------------ */

    /* Set by uplink_table: where this switch sends a job's partial sums, and from where
     * (port, source IPv4) the job's results come back. */
    bit<9> uplink_port = 0;
    mac_addr_t uplink_src_mac = 0;
    ipv4_addr_t uplink_src_ipv4 = 0;
    mac_addr_t uplink_dst_mac = 0;
    ipv4_addr_t uplink_dst_ipv4 = 0;

    /* A job that is aggregated further up: this switch sums its local workers and sends
     * the partial sum up as one worker of the switch above (src_* are this switch's
     * addresses there, dst_* the upper switch's). num_workers, mcast_grp, slot_base and
     * pool_size are the job's local ones, as in its workers' set_worker entries: a result
     * from above has no worker entry to take them from. */
    action set_uplink(bit<9> port, mac_addr_t src_mac, ipv4_addr_t src_ipv4, mac_addr_t dst_mac, ipv4_addr_t dst_ipv4,
                      bit<8> num_workers, bit<16> mcast_grp, bit<16> slot_base, bit<16> pool_size) {
        uplink_port = port;
        uplink_src_mac = src_mac;
        uplink_src_ipv4 = src_ipv4;
        uplink_dst_mac = dst_mac;
        uplink_dst_ipv4 = dst_ipv4;
        meta.num_workers = num_workers;
        result_mcast_grp = mcast_grp;
        meta.slot_base = slot_base;
        meta.pool_size = pool_size;
    }

    /* Default NoAction: this switch is the top of the job's tree (it completes the sum). */
    table uplink_table {
        key = { meta.job_id: exact; }
        actions = { set_uplink; NoAction; }
        default_action = NoAction();
        size = SWITCHML_UPLINK_TABLE_SIZE;
    }

    /* The local partial sum (hdr.data and exponent filled in by the caller) leaves as an
     * update of this switch to the switch above, cut to an update's size. */
    action send_up() {
        hdr.ethernet.srcAddr = uplink_src_mac;
        hdr.ethernet.dstAddr = uplink_dst_mac;
        hdr.ipv4.srcAddr = uplink_src_ipv4;
        hdr.ipv4.dstAddr = uplink_dst_ipv4;
        hdr.udp.checksum = 0;
        standard_metadata.egress_spec = uplink_port;
        truncate((bit<32>)SWITCHML_FRAME_BYTES);
    }

    /* ---- aggregation helpers --------------------------------------------------------- */

    action compute_indices() {
        bit<32> cell = (bit<32>)meta.slot_base + (bit<32>)hdr.switchml.slot;
        meta.reg_index = (bit<32>)hdr.switchml.shadow_set * SWITCHML_MAX_POOL_SIZE + cell;
        meta.other_index = (bit<32>)(8w1 - hdr.switchml.shadow_set) * SWITCHML_MAX_POOL_SIZE + cell;
    }

    /* Turn the update into its result (hdr.data and exponent are filled in by the caller):
     * answer from the address the worker sent to; egress writes the destination. */
    action make_result() {
        hdr.switchml.msg_type = SWITCHML_MSG_RESULT;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ipv4.srcAddr = hdr.ipv4.dstAddr;
        hdr.udp.srcPort = hdr.udp.dstPort;
        hdr.udp.checksum = 0;
        meta.is_result = 1;
    }

    apply {
        meta.ingress_port = standard_metadata.ingress_port;

        /* 1. Drop simulator: loss on the link into the switch, for every packet. */
        bit<32> ingress_threshold;
        ingress_drop_threshold.read(ingress_threshold, 0);
        random(meta.drop_draw, (bit<32>)0, (bit<32>)0xFFFFFFFE);
        if (meta.drop_draw < ingress_threshold) {
            mark_to_drop(standard_metadata);
            event_counter.count(EV_DROP_SIM_INGRESS);
            return;
        }

        /* 1b. The switch's own address: an ARP request for it (Ethernet/IPv4 ARP) or an
         * ICMP echo request to it (code 0, not a fragment) is answered; everything else,
         * other ARP and ICMP included, goes on as ordinary traffic. */
        bool arp_request = hdr.arp.isValid() && hdr.arp.oper == SWITCHML_ARP_REQUEST && hdr.arp.htype == 1
                           && hdr.arp.ptype == 0x0800 && hdr.arp.hlen == 6 && hdr.arp.plen == 4;
        bool echo_request = hdr.icmp.isValid() && hdr.icmp.type == SWITCHML_ICMP_ECHO_REQUEST && hdr.icmp.code == 0
                            && (hdr.ipv4.flags & 3w1) == 0 && hdr.ipv4.fragOffset == 0;
        if (arp_request || echo_request) {
            meta.target_ipv4 = arp_request ? hdr.arp.tpa : hdr.ipv4.dstAddr;
            if (switch_addr_table.apply().hit) {
                if (arp_request) {
                    arp_reply();
                    event_counter.count(EV_ARP_REPLY);
                } else {
                    icmp_echo_reply();
                    event_counter.count(EV_ICMP_ECHO_REPLY);
                }
                return;
            }
        }

        /* 2. Only packets to an aggregation port are SwitchML updates; the rest (and, on a
         * pass-through switch, the updates too) take the L2 path at the end. */
        bool ordinary = true;
        if (hdr.udp.isValid()
                && (hdr.udp.dstPort & SWITCHML_UDP_PORT_MASK) == SWITCHML_UDP_PORT_BASE) {
            ordinary = false;

            /* 3. Malformed: truncated, wrong k, neither an update nor a result, bad set or slot. */
            if (standard_metadata.parser_error != error.NoError
                    || hdr.switchml.num_elements != SWITCHML_K
                    || hdr.udp.length != SWITCHML_UDP_LENGTH
                    || (hdr.switchml.msg_type != SWITCHML_MSG_UPDATE
                        && hdr.switchml.msg_type != SWITCHML_MSG_RESULT)
                    || hdr.switchml.shadow_set > 1
                    || hdr.switchml.slot >= SWITCHML_MAX_POOL_SIZE) {
                mark_to_drop(standard_metadata);
                event_counter.count(EV_DROP_MALFORMED);
            } else {
                /* 4. Who sent it: a worker's update (worker_table; drop_unknown_sender
                 * drops and counts by itself), or a result from the switch above (4R). */
                bool from_worker = false;
                bool from_above = false;
                if (hdr.switchml.msg_type == SWITCHML_MSG_UPDATE) {
                    switch (worker_table.apply().action_run) {
                        forward_as_ordinary: {
                            ordinary = true;
                        }
                        set_worker: {
                            if (hdr.switchml.job_id != meta.job_id) {
                                /* 5. Not the sender's job. */
                                mark_to_drop(standard_metadata);
                                event_counter.count(EV_DROP_WRONG_JOB);
                            } else {
                                from_worker = true;
                            }
                        }
                    }
                } else {
                    meta.job_id = hdr.switchml.job_id;
                    from_above = true;
                }

                if (from_worker || from_above) {
                    /* The job's uplink: where a partial sum goes, and who may send results. */
                    bool has_uplink = uplink_table.apply().hit;
                    if (from_above && (!has_uplink
                            || standard_metadata.ingress_port != uplink_port
                            || hdr.ipv4.srcAddr != uplink_dst_ipv4)) {
                        /* 4R. A result, but not from this job's uplink. */
                        mark_to_drop(standard_metadata);
                        event_counter.count(EV_DROP_MALFORMED);
                    } else if (hdr.switchml.slot >= meta.pool_size
                            || (bit<32>)meta.slot_base + (bit<32>)hdr.switchml.slot >= SWITCHML_MAX_POOL_SIZE) {
                        /* 5b. Beyond the job's slot range (other jobs' cells), or its cell past
                         * the registers (an entry the control plane should have refused):
                         * never index another set's or job's cell. */
                        mark_to_drop(standard_metadata);
                        event_counter.count(EV_DROP_OUTSIDE_POOL);
                    } else {
                        /* 6. Aggregation: read each register once, decide, write once. */
                        compute_indices();
                        bit<32> contributors;
                        bitmap.read(contributors, meta.reg_index);
                        bit<32> contributions;
                        count.read(contributions, meta.reg_index);
                        bit<32> max_exponent;
                        exponent.read(max_exponent, meta.reg_index);
                        bit<32> version_seq;
                        seq.read(version_seq, meta.reg_index);
                        bit<32> num_workers = (bit<32>)meta.num_workers;
                        /* The count at which the cell holds the job's result: all local
                         * contributions, plus the result from above when there is an uplink. */
                        bit<32> complete = has_uplink ? num_workers + 1 : num_workers;
                        bool is_new = (contributors & meta.rank_bit) == 0;

                        if (from_above) {
                            /* 6R. The result of the version this switch sent its partial sum
                             * up for: keep it (to answer retransmissions) and multicast it to
                             * the job's workers. Anything else is an old or repeated copy. */
                            if (contributions == num_workers && hdr.switchml.seq == version_seq) {
                                store_first_values();
                                exponent.write(meta.reg_index, (bit<32>)hdr.switchml.exponent);
                                count.write(meta.reg_index, complete);
                                hdr.udp.checksum = 0;
                                meta.is_result = 1;
                                standard_metadata.mcast_grp = result_mcast_grp;
                                event_counter.count(EV_RESULT_MULTICAST);
                            } else {
                                mark_to_drop(standard_metadata);
                                event_counter.count(EV_DROP_STALE);
                            }
                        } else {
                            /* 6a. Stale: the update belongs to an older version of the slot
                             * than the one this cell holds (a reordered or long-delayed copy;
                             * docs/dataplane.md, "Reordering"). Workers number their packets
                             * in one increasing sequence, and every worker's packet for one
                             * version carries the same seq. */
                            bool stale;
                            if (is_new && contributors == 0) {
                                /* Opening a version: stale unless newer than the last one held. */
                                stale = contributions != 0
                                        && (int<32>)(hdr.switchml.seq - version_seq) <= 0;
                            } else if (is_new) {
                                /* Joining a version: it must be this one, and not complete
                                 * (a complete version takes no new ranks: they have moved on). */
                                stale = hdr.switchml.seq != version_seq || contributions >= num_workers;
                            } else {
                                stale = hdr.switchml.seq != version_seq;
                            }

                            if (stale) {
                                mark_to_drop(standard_metadata);
                                event_counter.count(EV_DROP_STALE);
                            } else if (is_new) {
                                // BEGIN LAB 2: set the rank bit (clear it in the other set), store the first contribution or add, keep the max exponent, count
                                /* A new contribution. Clearing the rank from the other set
                                 * readies that set for this worker's next chunk. */
                                bitmap.write(meta.reg_index, contributors | meta.rank_bit);
                                bit<32> other_contributors;
                                bitmap.read(other_contributors, meta.other_index);
                                bitmap.write(meta.other_index, other_contributors & ~meta.rank_bit);

                                if (contributors == 0) {
                                    /* First contribution of this version: overwrite. */
                                    store_first_values();
                                    max_exponent = (bit<32>)hdr.switchml.exponent;
                                    contributions = 1;
                                    seq.write(meta.reg_index, hdr.switchml.seq);
                                } else {
                                    add_values();
                                    int<8> incoming = (int<8>)hdr.switchml.exponent;
                                    int<8> stored = (int<8>)(bit<8>)max_exponent;
                                    if (incoming > stored) {
                                        max_exponent = (bit<32>)hdr.switchml.exponent;
                                    }
                                    contributions = contributions + 1;
                                }
                                count.write(meta.reg_index, contributions);
                                exponent.write(meta.reg_index, max_exponent);
                                // END LAB 2

                                if (contributions == num_workers && has_uplink) {
                                    /* All local workers are in: the partial sum goes up, as
                                     * one worker of the switch above. */
                                    hdr.switchml.exponent = (bit<8>)max_exponent;
                                    send_up();
                                    event_counter.count(EV_PARTIAL_UP);
                                } else {
                                    // BEGIN LAB 2: every worker in: the result (max exponent, make_result) to result_mcast_grp, count EV_RESULT_MULTICAST; else drop, count EV_UPDATE_CONSUMED
                                    if (contributions == num_workers) {
                                        /* Complete: hdr.data holds the sum; multicast it. */
                                        hdr.switchml.exponent = (bit<8>)max_exponent;
                                        make_result();
                                        standard_metadata.mcast_grp = result_mcast_grp;
                                        event_counter.count(EV_RESULT_MULTICAST);
                                    } else {
                                        mark_to_drop(standard_metadata);
                                        event_counter.count(EV_UPDATE_CONSUMED);
                                    }
                                    // END LAB 2
                                }
                            } else if (contributions == num_workers && has_uplink) {
                                /* A retransmission while the result from above is missing:
                                 * the partial sum or that result was lost, so send the
                                 * partial sum up again; the switch above answers it. */
                                read_values();
                                hdr.switchml.exponent = (bit<8>)max_exponent;
                                send_up();
                                event_counter.count(EV_PARTIAL_UP);
                            } else if (contributions == complete) {
                                // BEGIN LAB 3: a retransmission to a complete version: send the stored result back to its sender only
                                /* A retransmission to a complete version: the worker
                                 * missed the result, so send the stored one back to it. */
                                read_values();
                                hdr.switchml.exponent = (bit<8>)max_exponent;
                                make_result();
                                standard_metadata.egress_spec = standard_metadata.ingress_port;
                                meta.dst_rank = meta.rank;
                                event_counter.count(EV_RESULT_UNICAST);
                                // END LAB 3
                            } else {
                                // BEGIN LAB 3: a retransmission before completion: drop it and count EV_RETX_IGNORED
                                /* A retransmission before completion: the others are
                                 * still missing, the result will come by multicast. */
                                mark_to_drop(standard_metadata);
                                event_counter.count(EV_RETX_IGNORED);
                                // END LAB 3
                            }
                        }
                    }
                }
            }
        }

        if (ordinary) {
            l2_learn_table.apply();
            l2_table.apply();
            event_counter.count(EV_FORWARDED);
        }
    }
}

#endif
