/*
 * constants.p4 -- the single definition of SwitchML's build parameters.
 *
 * The P4 program includes this file, and the Python side (protocol/params.py) reads
 * the same #define lines, so k, the pool size, the UDP ports and the counter indices
 * cannot drift apart between the bmv2 program and the embedded software switch.
 * Keep every value a plain decimal or hex literal: protocol/params.py parses them.
 * Pass -DSWITCHML_MAX_POOL_SIZE=... to p4c to build a different pool, -DSWITCHML_K=... (with
 * the generated per-element code for that k) for a different k.
 */
#ifndef SWITCHML_CONSTANTS_P4
#define SWITCHML_CONSTANTS_P4

/* Elements (int32) per packet: 32, 64, 128 or 256. A build for another k than this default
 * passes -DSWITCHML_K=... and puts the per-element code p4/switchml/gen_elements.py generates for it
 * first on the include path (switches/bmv2/compile.py does both). */
#ifndef SWITCHML_K
#define SWITCHML_K 32
#endif

/* Bytes of switchml_h (headers.p4; protocol/packet.py checks its struct against this). */
#define SWITCHML_HEADER_BYTES 13

/* Slots in the pool. Registers hold 2 * SWITCHML_MAX_POOL_SIZE entries (two shadow
 * sets); the control plane gives every job on the switch its own range of slots
 * (set_worker's slot_base and pool_size), and the ranges together fit in this. */
#ifndef SWITCHML_MAX_POOL_SIZE
#define SWITCHML_MAX_POOL_SIZE 512
#endif

/* Entries each table holds (its P4 size; every target refuses an entry beyond it, with
 * the same error, and the eBPF maps have these max_entries). A source MAC that does not
 * fit l2_learn_table or l2_table is not learned: its frames stay flooded, and each one
 * that tried is counted (EV_L2_NOT_LEARNED). */
#define SWITCHML_WORKER_TABLE_SIZE 1024
#define SWITCHML_UPLINK_TABLE_SIZE 64
#define SWITCHML_L2_TABLE_SIZE 4096
#define SWITCHML_RANK_ADDR_TABLE_SIZE 1024
/* The switch's own IPv4 addresses, which it answers ARP and ICMP echo requests for. */
#define SWITCHML_SWITCH_ADDR_TABLE_SIZE 16

/* Most workers one job can have: the contribution bitmap is 32 bits wide. */
#define SWITCHML_MAX_WORKERS 32

/* UDP destination ports (dst & mask == base) that carry aggregation updates. */
#define SWITCHML_UDP_PORT_BASE 0xBEE0
#define SWITCHML_UDP_PORT_MASK 0xFFF0
/* UDP port on which workers receive results (outside the aggregation range). */
#define SWITCHML_WORKER_UDP_PORT 0xBF00

/* switchml_h.msg_type */
#define SWITCHML_MSG_UPDATE 0
#define SWITCHML_MSG_RESULT 1

/* What the switch answers for its own address (SwitchMLIngress.switch_addr_table): ARP
 * requests (etherType, opcodes) and ICMP echo requests (IPv4 protocol, types). */
#define SWITCHML_ETHERTYPE_ARP 0x0806
#define SWITCHML_ARP_REQUEST 1
#define SWITCHML_ARP_REPLY 2
#define SWITCHML_IPPROTO_ICMP 1
#define SWITCHML_ICMP_ECHO_REQUEST 8
#define SWITCHML_ICMP_ECHO_REPLY 0

/* Multicast group used to flood ordinary traffic; SwitchML result groups are set per
 * job by the control plane (worker_table's mcast_grp parameter). */
#define SWITCHML_FLOOD_MCAST_GRP 1

/* Indices into SwitchMLIngress.event_counter: what happened to each packet. Every packet
 * the ingress takes in counts under exactly one of EV_UPDATE_CONSUMED .. EV_ICMP_ECHO_REPLY
 * (their sum is the frames the pipeline took in); EV_L2_NOT_LEARNED is counted besides a
 * forwarded frame's EV_FORWARDED. */
#define EV_UPDATE_CONSUMED 0      /* new contribution, slot not yet complete */
#define EV_RESULT_MULTICAST 1     /* new contribution completed the slot: result multicast */
#define EV_RESULT_UNICAST 2       /* retransmission to a complete slot: result unicast */
#define EV_RETX_IGNORED 3         /* retransmission before the slot completed: dropped */
#define EV_DROP_UNKNOWN_SENDER 4  /* (ingress port, source IPv4) not in worker_table */
#define EV_DROP_WRONG_JOB 5       /* job_id differs from the sender's job */
#define EV_DROP_MALFORMED 6       /* truncated, wrong k, not an update, slot beyond the registers */
#define EV_DROP_SIM_INGRESS 7     /* dropped by the ingress drop simulator */
#define EV_FORWARDED 8            /* ordinary (non-SwitchML) traffic forwarded */
#define EV_DROP_STALE 9           /* update of an older version than its cell holds (reordered) */
#define EV_DROP_OUTSIDE_POOL 10   /* slot beyond the job's pool (another job's cells) or its cell past the registers */
#define EV_PARTIAL_UP 11          /* local sum (or its retransmission) sent to the switch above */
#define EV_ARP_REPLY 12           /* ARP request for the switch's address: answered out of the ingress port */
#define EV_ICMP_ECHO_REPLY 13     /* ICMP echo request to the switch's address: answered out of the ingress port */
#define EV_L2_NOT_LEARNED 14      /* also forwarded: its source MAC not learned, l2_learn_table or l2_table full */
#define EV_COUNT 15

/* Indices into SwitchMLEgress.egress_counter. */
#define EGV_SENT 0                /* packets leaving the switch */
#define EGV_DROP_SIM_EGRESS 1     /* dropped by the egress drop simulator */
#define EGV_COUNT 2

#endif
