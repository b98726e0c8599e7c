/*
 * headers.p4 -- packet headers and metadata of the SwitchML program.
 *
 * Wire format of an aggregation packet (all fields big-endian):
 *   Ethernet (14) / IPv4 (20, no options) / UDP (8, checksum 0) /
 *   switchml_h (12) / switchml_data_h (SWITCHML_K x int32)
 * protocol/packet.py defines the same layout for Python; tests/test_p4_contract.py
 * checks that the two agree field by field.
 */
#ifndef SWITCHML_HEADERS_P4
#define SWITCHML_HEADERS_P4

#include "constants.p4"

/* Bytes of an update or result: Ethernet (14) + IPv4 (20) + UDP (8) + switchml_h (12) + k int32. */
#define SWITCHML_FRAME_BYTES (14 + 20 + 8 + 12 + 4 * SWITCHML_K)

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;

header ethernet_h {
    mac_addr_t dstAddr;
    mac_addr_t srcAddr;
    bit<16>    etherType;
}

header ipv4_h {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     totalLen;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     fragOffset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdrChecksum;
    ipv4_addr_t srcAddr;
    ipv4_addr_t dstAddr;
}

header udp_h {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

/* ARP for IPv4 over Ethernet (etherType 0x0806): the switch answers requests for its own
 * address (SwitchMLIngress.switch_addr_table). */
header arp_h {
    bit<16>     htype;     /* 1: Ethernet */
    bit<16>     ptype;     /* 0x0800: IPv4 */
    bit<8>      hlen;      /* 6 */
    bit<8>      plen;      /* 4 */
    bit<16>     oper;      /* 1 request, 2 reply */
    mac_addr_t  sha;
    ipv4_addr_t spa;
    mac_addr_t  tha;
    ipv4_addr_t tpa;
}

/* The first four bytes of an ICMP message (IPv4 protocol 1): all an echo reply rewrites. */
header icmp_h {
    bit<8>  type;          /* 8 echo request, 0 echo reply */
    bit<8>  code;
    bit<16> checksum;
}

/* The SwitchML header. The worker rank is deliberately absent: the switch derives it
 * from worker_table (ingress port + source IPv4), never from the packet. */
header switchml_h {
    bit<8>  msg_type;      /* SWITCHML_MSG_UPDATE or SWITCHML_MSG_RESULT */
    bit<8>  shadow_set;    /* which of the slot's two shadow copies: 0 or 1 */
    bit<16> job_id;        /* must match the sender's job in worker_table */
    bit<16> slot;          /* the job's pool index, < its pool_size (worker_table) */
    bit<8>  num_elements;  /* elements that follow; must equal SWITCHML_K */
    bit<8>  exponent;      /* int8 (two's complement): block exponent, one round ahead */
    bit<32> seq;           /* packet sequence number, echoed in the result */
}

/* SWITCHML_K int32 elements, written out because P4 has no loops. */
header switchml_data_h {
    bit<32> d00;
    bit<32> d01;
    bit<32> d02;
    bit<32> d03;
    bit<32> d04;
    bit<32> d05;
    bit<32> d06;
    bit<32> d07;
    bit<32> d08;
    bit<32> d09;
    bit<32> d10;
    bit<32> d11;
    bit<32> d12;
    bit<32> d13;
    bit<32> d14;
    bit<32> d15;
    bit<32> d16;
    bit<32> d17;
    bit<32> d18;
    bit<32> d19;
    bit<32> d20;
    bit<32> d21;
    bit<32> d22;
    bit<32> d23;
    bit<32> d24;
    bit<32> d25;
    bit<32> d26;
    bit<32> d27;
    bit<32> d28;
    bit<32> d29;
    bit<32> d30;
    bit<32> d31;
}

struct headers_t {
    ethernet_h      ethernet;
    ipv4_h          ipv4;
    udp_h           udp;
    switchml_h      switchml;
    switchml_data_h data;
    arp_h           arp;
    icmp_h          icmp;
}

/* Learning digest: a source MAC seen on a port (see SwitchMLIngress.l2_learn_table), and
 * the frame's length, which the controller counts when it cannot learn the source. */
struct l2_learn_digest_t {
    mac_addr_t srcAddr;
    bit<9>     ingress_port;
    bit<32>    packet_length;
}

struct metadata_t {
    bit<8>  rank;            /* sender's rank, from worker_table */
    bit<32> rank_bit;        /* 1 << rank */
    bit<16> job_id;          /* sender's job, from worker_table */
    bit<8>  num_workers;     /* workers in the sender's job */
    bit<16> slot_base;       /* first register cell of the sender's job's slot range */
    bit<16> pool_size;       /* slots of the sender's job: slot_base .. slot_base + pool_size - 1 */
    bit<32> reg_index;       /* shadow_set * SWITCHML_MAX_POOL_SIZE + slot_base + slot */
    bit<32> other_index;     /* (1 - shadow_set) * SWITCHML_MAX_POOL_SIZE + slot_base + slot */
    bit<1>  is_result;       /* this packet leaves as a SwitchML result */
    bit<8>  dst_rank;        /* unicast result: rank to address in egress */
    bit<9>  ingress_port;    /* kept for egress flood pruning */
    bit<32> drop_draw;       /* random draw of the drop simulator */
    bit<32> target_ipv4;     /* the address an ARP request asks for or an ICMP echo request goes to: switch_addr_table's key */
}

#endif
