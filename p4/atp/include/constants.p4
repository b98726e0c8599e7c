/*
 * constants.p4 -- the single definition of ATP's build parameters.
 *
 * p4/atp.p4 includes this file, and the Python side (protocol/atp/params.py) reads the
 * same #define lines, so k, the pool size, the UDP ports, the flags and the counter indices
 * cannot drift apart between the bmv2 program and the embedded pipeline
 * (switches/embedded/atp/). Keep every value a plain decimal or hex literal: params.py
 * parses them. Pass -DATP_POOL_SIZE=... to p4c to build another pool, -DATP_K=... (with the
 * per-element code p4/atp/gen_elements.py generates for it) for another k.
 */
#ifndef ATP_CONSTANTS_P4
#define ATP_CONSTANTS_P4

/* Values (int32) per packet: SwitchML's k (32, 64, 128 or 256), so the two designs' frames
 * compare. A build for another k than this default passes -DATP_K=... and puts the
 * generated per-element code for it first on the include path (switches/bmv2/compile.py, ATP's P4Program). */
#ifndef ATP_K
#define ATP_K 32
#endif

/* Bytes of atp_h (headers.p4; protocol/atp/packet.py checks its struct against this). */
#define ATP_HEADER_BYTES 16

/* Aggregators shared by every job on the switch: every register holds this many cells,
 * indexed by atp_h.agtr. The authors' Tofino build has 20,000; the multi-tenant experiment
 * sweeps it as a register budget. */
#ifndef ATP_POOL_SIZE
#define ATP_POOL_SIZE 4096
#endif
/* agtr is 16 bits, and 0xFFFF is never an aggregator: new_agtr's "re-point nothing". */
#define ATP_MAX_POOL_SIZE 0xFFFF
#define ATP_NO_INDEX 0xFFFF

/* Most workers one job can have: the contribution bitmap is 32 bits wide. */
#define ATP_MAX_WORKERS 32

/* UDP destination ports (dst & mask == base) that carry ATP packets; SwitchML's range
 * (0xBEE0) is ordinary traffic to this program. Workers send to the PS's port, the PS sends
 * its results to the switch's, and each worker's copy gets the worker's port. */
#define ATP_UDP_PORT_BASE 0xBEF0
#define ATP_UDP_PORT_MASK 0xFFF0
#define ATP_PS_UDP_PORT 0xBEF0
#define ATP_SWITCH_UDP_PORT 0xBEF1
#define ATP_WORKER_UDP_PORT 0xBEF2

/* atp_h.flags */
#define ATP_FLAG_ACK 0x01        /* a result from the PS (also the acknowledgement) */
#define ATP_FLAG_COLLISION 0x02  /* to the PS: the aggregator was taken; from it: adopt new_agtr */
#define ATP_FLAG_RESEND 0x04     /* a worker's retransmission: never claims, flushes its own aggregator */
#define ATP_FLAG_ECN 0x08        /* congestion seen on the path or earlier at this aggregator */
#define ATP_FLAG_OVERFLOW 0x80   /* not summable in the switch: to the PS untouched */

/* Entries each table holds (its P4 size; every target refuses one more). */
#define ATP_SENDER_TABLE_SIZE 1024
#define ATP_WORKER_ADDR_TABLE_SIZE 1024
#define ATP_L2_TABLE_SIZE 1024

/* Multicast group l2_flood uses (every port); each job's result group is set by the control
 * plane (set_ps's mcast_grp). */
#define ATP_FLOOD_MCAST_GRP 1

/* Egress queue depth (packets) at which an ATP packet leaves ECN-marked, until the control
 * plane writes ATPEgress.ecn_threshold (0 turns marking off). */
#define ATP_DEFAULT_ECN_THRESHOLD 64

/* Indices into ATPIngress.event_counter: what happened to each packet. Every frame the
 * ingress takes in counts under exactly one (protocol/atp/params.py's INGRESS_EVENTS). */
#define EV_AGGREGATED 0           /* new contribution, aggregator not yet complete: dropped */
#define EV_FULL_TO_PS 1           /* new contribution completed it: the full sum to the PS */
#define EV_COLLISION_TO_PS 2      /* aggregator held by another job or sequence: tagged, to the PS */
#define EV_DUPLICATE_DROPPED 3    /* repeated contribution before completion: dropped */
#define EV_DUPLICATE_TO_PS 4      /* repeated contribution after completion: the stored sums to the PS again */
#define EV_RESEND_FLUSHED 5       /* resend on its own aggregator: partial sum to the PS, aggregator freed */
#define EV_RESEND_PASSED 6        /* resend on an aggregator it does not own: to the PS unchanged */
#define EV_OVERFLOW_TO_PS 7       /* OVERFLOW set: to the PS untouched */
#define EV_RESULT_FREED 8         /* PS result that owned its aggregator: freed, multicast */
#define EV_RESULT_NOT_OWNER 9     /* PS result that did not own it: nothing freed, multicast */
#define EV_DROP_MALFORMED 10      /* wrong length, aggregator beyond the pool, sequence 0 */
#define EV_DROP_UNKNOWN_SENDER 11 /* (ingress port, source IPv4) not in sender_table */
#define EV_DROP_WRONG_JOB 12      /* another job's app_id, another worker's bit, a worker's ACK, a PS's non-result */
#define EV_FORWARDED 13           /* ordinary (non-ATP) traffic forwarded */
#define EV_DROP_SIM_INGRESS 14    /* dropped by the ingress drop simulator (SwitchML's name) */
#define EV_COUNT 15

/* Indices into ATPEgress.egress_counter. */
#define EGV_SENT 0                /* every copy leaving the switch */
#define EGV_ECN_MARKED 1          /* those of them egress marked */
#define EGV_DROP_SIM_EGRESS 2     /* dropped by the egress drop simulator instead (SwitchML's name) */
#define EGV_COUNT 3

#endif
