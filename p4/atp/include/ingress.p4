/*
 * ingress.p4 -- ATPIngress: the drop simulator, the sender check, the shared aggregator pool,
 * PS results freeing it, and L2 forwarding of everything else (docs/dataplane-atp.md,
 * ATPIngress, steps 0-8, R).
 *
 * Every register holds ATP_POOL_SIZE cells, one per aggregator, indexed by hdr.atp.agtr.
 * Isolation rests on the owner tag (owner_app, owner_seq): no packet adds into an
 * aggregator another job or another sequence holds. A packet that finds it taken goes to its
 * PS tagged, and the PS, which deduplicates by bitmap, finishes the sum: sharing costs
 * collisions, never a wrong sum.
 *
 * Each packet's read-modify-write of its aggregator is one action (aggregate() for a worker's
 * packet, release() for a PS result): bmv2 holds the locks of every register an action uses
 * while it runs, so no other packet sees an aggregator half updated.
 */
#ifndef ATP_INGRESS_P4
#define ATP_INGRESS_P4

#include "headers.p4"

#define ALL_ONES 32w0xFFFFFFFF

control ATPIngress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    /* The owner tag: (owner_app, owner_seq); owner_seq 0 is free (sequences start at 1). */
    register<bit<32>>(ATP_POOL_SIZE) owner_app;
    register<bit<32>>(ATP_POOL_SIZE) owner_seq;
    /* Contributors so far (OR of their bits), how many, and the sticky ECN bit (0/1). */
    register<bit<32>>(ATP_POOL_SIZE) bitmap;
    register<bit<32>>(ATP_POOL_SIZE) count;
    register<bit<32>>(ATP_POOL_SIZE) ecn;
    /* What happened to each packet, indexed by the EV_* constants (packets and bytes). */
    counter(EV_COUNT, CounterType.packets_and_bytes) event_counter;
    /* The drop simulator's, as SwitchMLIngress's: drop probability p as round(p * (2^32 - 1)),
     * a draw in [0, 2^32 - 2] below it drops. */
    register<bit<32>>(1) ingress_drop_threshold;

    /* value_00 .. value_{k-1} and contribute_values(): generated per k (p4/atp/gen_elements.py). */
#include <elements.p4>
#if ATP_ELEMENTS_K != ATP_K
#error "elements.p4 was generated for another k than ATP_K: run p4/atp/gen_elements.py --k K"
#endif

    /* -- sender_table: who sent the packet, from its ingress port and source IPv4 ------- */

    action set_worker(bit<16> app_id, bit<8> worker_id, bit<8> num_workers, bit<9> ps_port) {
        meta.sender = SENDER_WORKER;
        meta.app_id = app_id;
        meta.worker_id = worker_id;
        meta.num_workers = num_workers;
        meta.ps_port = ps_port;
    }

    action set_ps(bit<16> app_id, bit<16> mcast_grp) {
        meta.sender = SENDER_PS;
        meta.app_id = app_id;
        meta.mcast_grp = mcast_grp;
    }

    action drop_unknown_sender() {
        meta.sender = SENDER_UNKNOWN;
    }

    table sender_table {
        key = {
            standard_metadata.ingress_port: exact;
            hdr.ipv4.srcAddr: exact;
        }
        actions = { set_worker; set_ps; drop_unknown_sender; }
        default_action = drop_unknown_sender();
        size = ATP_SENDER_TABLE_SIZE;
    }

    /* -- l2_table: ordinary traffic (the control plane installs the hosts; no learning) -- */

    action l2_forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    action l2_flood() {
        standard_metadata.mcast_grp = ATP_FLOOD_MCAST_GRP;
        meta.is_flood = 1;
    }

    table l2_table {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { l2_forward; l2_flood; }
        default_action = l2_flood();
        size = ATP_L2_TABLE_SIZE;
    }

    /* -- the aggregator ------------------------------------------------------------------ */

    /* Steps 5-8 for a worker's packet that is not OVERFLOW, in one action: the owner check,
     * a resend's flush or pass, a collision or the first claim, and contribute(): the
     * packet's values are added if its bit is new (the first contributor writes, so values
     * an earlier owner left never leak in), and the aggregator's sums, bitmap and ECN are
     * written into the packet, which carries them if it goes on to the PS. */
    @atomic
    action aggregate() {
        bit<32> tag_app;
        bit<32> tag_seq;
        owner_app.read(tag_app, meta.index);
        owner_seq.read(tag_seq, meta.index);
        bool owned = tag_app == (bit<32>)hdr.atp.app_id && tag_seq == hdr.atp.seq;
        bool resend = hdr.atp.flags & ATP_FLAG_RESEND != 0;
        bool contribute = false;
        bool flush = false;
        if (resend) {
            /* 6. A resend never claims: it flushes its own aggregator, or passes. */
            meta.to_ps = 1;
            if (owned) {
                contribute = true;
                flush = true;
                meta.event = EV_RESEND_FLUSHED;
            } else {
                meta.event = EV_RESEND_PASSED;
            }
        } else if (!owned && tag_seq != 0) {
            /* 7. Taken by another job or sequence: tagged, to the PS, nothing touched. */
            hdr.atp.flags = hdr.atp.flags | ATP_FLAG_COLLISION;
            meta.to_ps = 1;
            meta.event = EV_COLLISION_TO_PS;
        } else {
            /* 7. Free: the first claim. */
            if (!owned) {
                owner_app.write(meta.index, (bit<32>)hdr.atp.app_id);
                owner_seq.write(meta.index, hdr.atp.seq);
            }
            contribute = true;
        }
        if (contribute) {
            bit<32> held;
            bit<32> contributions;
            bit<32> congested;
            bitmap.read(held, meta.index);
            count.read(contributions, meta.index);
            ecn.read(congested, meta.index);
            bool is_new = held & hdr.atp.bitmap == 0;
            /* v := (v & keep) + (d & add): a new first contributor writes, a new later one
             * adds (wrapping), a repeated one leaves the sums as they are. */
            bit<32> add = is_new ? ALL_ONES : 32w0;
            bit<32> keep = (is_new && held == 0) ? 32w0 : ALL_ONES;
            contribute_values(keep, add);
            if (is_new) {
                held = held | hdr.atp.bitmap;
                contributions = contributions + 1;
            }
            if (hdr.atp.flags & ATP_FLAG_ECN != 0) {
                congested = 1;
            }
            hdr.atp.bitmap = held;
            if (congested != 0) {
                hdr.atp.flags = hdr.atp.flags | ATP_FLAG_ECN;
            }
            if (flush) {
                /* 6. The flushed partial sum leaves in the packet; the aggregator is free. */
                owner_app.write(meta.index, 0);
                owner_seq.write(meta.index, 0);
                held = 0;
                contributions = 0;
                congested = 0;
            } else {
                /* 8. Complete: the full sum (or, repeated, the stored sums again) to the
                 * PS; the aggregator stays owned until the PS's result frees it. */
                bool complete = contributions == (bit<32>)meta.num_workers;
                if (complete) {
                    meta.to_ps = 1;
                    meta.event = is_new ? (bit<32>)EV_FULL_TO_PS : (bit<32>)EV_DUPLICATE_TO_PS;
                } else {
                    meta.event = is_new ? (bit<32>)EV_AGGREGATED : (bit<32>)EV_DUPLICATE_DROPPED;
                }
            }
            bitmap.write(meta.index, held);
            count.write(meta.index, contributions);
            ecn.write(meta.index, congested);
        }
    }

    /* Step R: a PS result frees the aggregator its sequence owns (the values stay: the next
     * first writer overwrites them), unless it asks the workers to resend as float
     * (OVERFLOW without RESEND); a result that does not own it frees nothing. Either way it
     * goes to the job's group. */
    @atomic
    action release() {
        bit<32> tag_app;
        bit<32> tag_seq;
        owner_app.read(tag_app, meta.index);
        owner_seq.read(tag_seq, meta.index);
        bool owned = tag_app == (bit<32>)hdr.atp.app_id && tag_seq == hdr.atp.seq;
        bool float_request = hdr.atp.flags & (ATP_FLAG_OVERFLOW | ATP_FLAG_RESEND) == ATP_FLAG_OVERFLOW;
        if (owned && !float_request) {
            owner_app.write(meta.index, 0);
            owner_seq.write(meta.index, 0);
            bitmap.write(meta.index, 0);
            count.write(meta.index, 0);
            ecn.write(meta.index, 0);
            meta.event = EV_RESULT_FREED;
        } else {
            meta.event = EV_RESULT_NOT_OWNER;
        }
    }

    apply {
        meta.ingress_port = standard_metadata.ingress_port;

        /* 0. Drop simulator: loss on the link into the switch, for every frame. */
        bit<32> ingress_threshold;
        ingress_drop_threshold.read(ingress_threshold, 0);
        random(meta.drop_draw, (bit<32>)0, (bit<32>)0xFFFFFFFE);
        if (meta.drop_draw < ingress_threshold) {
            mark_to_drop(standard_metadata);
            event_counter.count(EV_DROP_SIM_INGRESS);
            return;
        }

        meta.event = EV_DROP_MALFORMED;
        bool atp_port = hdr.udp.isValid() && hdr.udp.dstPort & ATP_UDP_PORT_MASK == ATP_UDP_PORT_BASE;
        if (!atp_port) {
            /* 1. Not ATP: L2 forwarding. */
            l2_table.apply();
            meta.event = EV_FORWARDED;
        } else if (standard_metadata.parser_error != error.NoError
                   || standard_metadata.packet_length != ATP_FRAME_BYTES
                   || hdr.udp.length != ATP_UDP_LENGTH
                   || hdr.atp.agtr >= ATP_POOL_SIZE
                   || hdr.atp.seq == 0) {
            /* 2. Malformed (a claim with sequence 0 would leave the aggregator looking free
             * to every job). meta.event is EV_DROP_MALFORMED already. */
        } else {
            meta.is_atp = 1;
            meta.index = (bit<32>)hdr.atp.agtr;
            /* 3. Who sent it comes from (ingress port, source IPv4), never from the packet. */
            sender_table.apply();
            if (meta.sender == SENDER_UNKNOWN) {
                meta.event = EV_DROP_UNKNOWN_SENDER;
            } else if (meta.sender == SENDER_PS) {
                if (hdr.atp.flags & ATP_FLAG_ACK == 0 || hdr.atp.app_id != meta.app_id) {
                    meta.event = EV_DROP_WRONG_JOB;
                } else {
                    release();
                    standard_metadata.mcast_grp = meta.mcast_grp;
                    meta.is_result = 1;
                }
            } else if (hdr.atp.app_id != meta.app_id
                       || meta.worker_id >= ATP_MAX_WORKERS
                       || hdr.atp.bitmap != (bit<32>)1 << meta.worker_id
                       || hdr.atp.flags & ATP_FLAG_ACK != 0) {
                /* A worker names its own job and only its own bit; it never sends a result. */
                meta.event = EV_DROP_WRONG_JOB;
            } else {
                /* The fan-in comes from the table too. */
                hdr.atp.fan_in = meta.num_workers;
                if (hdr.atp.flags & ATP_FLAG_OVERFLOW != 0) {
                    /* 4. Not summable in the switch: to the PS untouched. */
                    meta.to_ps = 1;
                    meta.event = EV_OVERFLOW_TO_PS;
                } else {
                    aggregate();
                }
                if (meta.to_ps == 1) {
                    standard_metadata.egress_spec = meta.ps_port;
                }
            }
        }
        if (meta.to_ps == 0 && meta.is_result == 0 && meta.event != EV_FORWARDED) {
            mark_to_drop(standard_metadata);
        }
        event_counter.count(meta.event);
    }
}

#endif
