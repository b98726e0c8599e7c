/*
 * switchml.bpf.c -- the SwitchML data plane of docs/dataplane.md as one TC (clsact,
 * direct-action) program, attached to the ingress of every switch port.
 *
 * Read it beside p4/switchml/include/ingress.p4 and switches/embedded/switchml/ingress.py: the maps carry the
 * P4 program's register, table and counter names, and the steps carry the numbers of
 * docs/dataplane.md. One program runs the whole v1model pipeline for a received frame:
 *
 *   SwitchMLParser          parse()
 *   SwitchMLIngress         switchml_ingress(), steps 1-6 (1b: answer_own_address())
 *   traffic manager         replicate(): one bpf_clone_redirect per multicast copy
 *   SwitchMLEgress          switchml_egress(), steps 1-3, per copy, before it is sent
 *   SwitchMLComputeChecksum ipv4_checksum()
 *
 * Copies go out through the port's egress qdisc (bpf_clone_redirect / bpf_redirect to the
 * port's egress), so the testbed's htb shaping of the link applies as for any frame.
 *
 * Concurrency: the kernel runs this program on every core at once (one softirq per core,
 * frames from different workers land on different cores). A slot's aggregation (step 6)
 * reads and writes bitmap, count, exponent, seq and the k values of its cell, and clears
 * the rank's bit in the other shadow set's cell; interleaving two such updates would lose
 * a contribution or complete a slot twice. Both shadow sets of a slot therefore live in
 * one map value with one bpf_spin_lock, and step 6 runs entirely under it: the same
 * serial order per slot that a P4 switch's register pipeline gives. The verifier allows
 * no helper calls under the lock, so the elements are loaded before and stored after.
 * k elements (1 KiB at k = 256) do not fit the 512-byte BPF stack: a packet's elements are
 * loaded into a per-CPU scratch map (``scratch``) instead, kept in network byte order as
 * on the wire, and byte-swapped inside the element loops.
 * Counters are per-CPU (the control plane sums the cores); tables are hash maps, whose
 * lookups and updates are safe from any core.
 *
 * What every program of the target shares (the multicast maps, the port wiring, the
 * counter cells, mac_key, ipv4_checksum, to_port) is in ../tc_switch.h.
 */
#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "constants.p4"
#include "switchml.h"
#include "tc_switch.h"

#define SWITCHML_UDP_LENGTH (sizeof(struct udphdr) + sizeof(struct switchml_h) + 4 * SWITCHML_K)
#define SWITCHML_OFFSET (ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr))
#define DATA_OFFSET (SWITCHML_OFFSET + sizeof(struct switchml_h))
/* A result is exactly these bytes: headers + switchml_h + k elements (docs/dataplane.md). */
#define SWITCHML_FRAME_BYTES (DATA_OFFSET + 4 * SWITCHML_K)
#define VLAN_TAG_BYTES 4

/* ---- headers (p4/switchml/include/headers.p4) ------------------------------------------------- */

struct switchml_h {
	__u8 msg_type;
	__u8 shadow_set;
	__be16 job_id;
	__be16 slot;
	__be16 num_elements;
	__u8 exponent; /* int8 */
	__be32 seq;
} __attribute__((packed));

/* Everything up to the elements: what the parser extracts before switchml_data_h. */
struct headers {
	struct ethhdr ethernet;
	struct iphdr ipv4;
	struct udphdr udp;
	struct switchml_h switchml;
} __attribute__((packed));

/* What a result's per-copy rewrite replaces: Ethernet + IPv4 + UDP. */
struct address_headers {
	struct ethhdr ethernet;
	struct iphdr ipv4;
	struct udphdr udp;
} __attribute__((packed));

/* ---- SwitchMLIngress state ------------------------------------------------------------ */

/* switchml_data_h: the k elements of the packet in hand, network byte order. One cell per
 * CPU: a program run is not interrupted on its core by another run (tc runs with bottom
 * halves off, and a copy this program redirects is received later, from the backlog), so
 * the cell is this run's from the load to the store. */
struct switchml_data {
	__be32 d[SWITCHML_K];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct switchml_data);
} scratch SEC(".maps");

/* One cell of the registers bitmap, count, exponent, seq and value_00..value_XX: the cell
 * at index shadow_set * SWITCHML_MAX_POOL_SIZE + slot_base + slot of each register array. */
struct register_cell {
	__u32 bitmap;
	__u32 count;
	__u32 exponent; /* int8 in the low byte, as (bit<32>)hdr.switchml.exponent */
	__u32 seq;
	__u32 value[SWITCHML_K];
};

/* Both shadow sets of one slot under one lock: step 6 writes both (bitmap[other]). */
struct slot_cells {
	struct bpf_spin_lock lock;
	struct register_cell set[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SWITCHML_MAX_POOL_SIZE);
	__type(key, __u32);
	__type(value, struct slot_cells);
} registers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EV_COUNT);
	__type(key, __u32);
	__type(value, struct counter_cell);
} event_counter SEC(".maps");

/* worker_table: (ingress_port, hdr.ipv4.srcAddr) -> set_worker(rank, job_id, num_workers,
 * mcast_grp, slot_base, pool_size) | forward_as_ordinary | drop_unknown_sender (default). */
struct worker_key {
	__u32 ingress_port;
	__u32 src_addr; /* host byte order, as the control plane writes an IPv4 address */
};

struct worker_action {
	__u32 action;
	__u32 rank;
	__u32 job_id;
	__u32 num_workers;
	__u32 mcast_grp;
	__u32 slot_base;
	__u32 pool_size;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SWITCHML_WORKER_TABLE_SIZE);
	__type(key, struct worker_key);
	__type(value, struct worker_action);
} worker_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct worker_action);
} worker_table_default SEC(".maps");

/* uplink_table: meta.job_id -> set_uplink(port, src_mac, src_ipv4, dst_mac, dst_ipv4,
 * num_workers, mcast_grp, slot_base, pool_size) | NoAction (default: this switch is the top). */
struct uplink_action {
	__u32 action;
	__u32 port;
	__u32 src_ipv4; /* host byte order */
	__u32 dst_ipv4;
	__u32 num_workers;
	__u32 mcast_grp;
	__u32 slot_base;
	__u32 pool_size;
	__u64 src_mac; /* host-order 48-bit integers */
	__u64 dst_mac;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SWITCHML_UPLINK_TABLE_SIZE);
	__type(key, __u32);
	__type(value, struct uplink_action);
} uplink_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct uplink_action);
} uplink_table_default SEC(".maps");

/* l2_learn_table: hdr.ethernet.srcAddr -> NoAction | l2_learn (default). MAC keys are the
 * 48-bit address as a host-order integer. */
struct l2_learn_action {
	__u32 action;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SWITCHML_L2_TABLE_SIZE);
	__type(key, __u64);
	__type(value, struct l2_learn_action);
} l2_learn_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct l2_learn_action);
} l2_learn_table_default SEC(".maps");

/* l2_table: hdr.ethernet.dstAddr -> l2_forward(port) | l2_flood (default). */
struct l2_action {
	__u32 action;
	__u32 port;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SWITCHML_L2_TABLE_SIZE);
	__type(key, __u64);
	__type(value, struct l2_action);
} l2_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct l2_action);
} l2_table_default SEC(".maps");

/* switch_addr_table: meta.target_ipv4 (host byte order) -> set_switch_mac(mac) | NoAction
 * (default: not the switch's address). */
struct switch_addr_action {
	__u32 action;
	__u32 reserved;
	__u64 mac; /* host-order 48-bit integer */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SWITCHML_SWITCH_ADDR_TABLE_SIZE);
	__type(key, __u32);
	__type(value, struct switch_addr_action);
} switch_addr_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct switch_addr_action);
} switch_addr_table_default SEC(".maps");

/* ---- SwitchMLEgress state ------------------------------------------------------------- */

/* rank_addr_table: (meta.job_id, meta.dst_rank) -> set_rank_addr(mac, ipv4, udp_port) | drop
 * (default). */
struct rank_addr_key {
	__u32 job_id;
	__u32 dst_rank;
};

struct rank_addr_action {
	__u32 action;
	__u32 ipv4; /* host byte order */
	__u64 mac;  /* host-order 48-bit integer */
	__u32 udp_port;
	__u32 reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SWITCHML_RANK_ADDR_TABLE_SIZE);
	__type(key, struct rank_addr_key);
	__type(value, struct rank_addr_action);
} rank_addr_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rank_addr_action);
} rank_addr_table_default SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGV_COUNT);
	__type(key, __u32);
	__type(value, struct counter_cell);
} egress_counter SEC(".maps");

/* ---- helpers ---------------------------------------------------------------------------- */

/* ---- SwitchMLEgress --------------------------------------------------------------------- */

/* Step 3, the drop simulator (egress), for any frame: 1 when it may leave. */
static __always_inline int switchml_egress_forward(__u32 wire_bytes)
{
	if (drop_simulator(&egress_drop_threshold)) {
		count(&egress_counter, EGV_DROP_SIM_EGRESS, wire_bytes);
		return 0;
	}
	count(&egress_counter, EGV_SENT, wire_bytes);
	return 1;
}

/* Steps 1 and 3 for one result copy to rank dst_rank of job job_id: rank_addr_table writes
 * the destination (a miss drops the copy, uncounted, as on bmv2), the IPv4 checksum is
 * recomputed, the drop simulator may drop it. 1 when the copy may leave. */
static __always_inline int switchml_egress_result(struct __sk_buff *skb, struct address_headers *hdr, __u32 job_id,
						  __u32 dst_rank)
{
	struct rank_addr_key key = {.job_id = job_id, .dst_rank = dst_rank};
	struct rank_addr_action *entry = bpf_map_lookup_elem(&rank_addr_table, &key);

	if (!entry) {
		__u32 zero = 0;

		entry = bpf_map_lookup_elem(&rank_addr_table_default, &zero);
		if (!entry)
			return 0;
	}
	if (entry->action != RANK_ADDR_TABLE_SET_RANK_ADDR)
		return 0;
	mac_bytes(hdr->ethernet.h_dest, entry->mac);
	hdr->ipv4.daddr = bpf_htonl(entry->ipv4);
	hdr->udp.dest = bpf_htons(entry->udp_port);
	hdr->ipv4.check = ipv4_checksum(&hdr->ipv4);
	if (bpf_skb_store_bytes(skb, 0, hdr, sizeof(*hdr), 0))
		return 0;
	/* 3. Drop simulator (egress). */
	return switchml_egress_forward(SWITCHML_FRAME_BYTES);
}

/* ---- traffic manager: multicast (tc_switch.h has the maps and to_port) ------------------- */

/* Multicast of a result: one copy per (rid, port) of the group, each addressed to rank
 * rid of job job_id by SwitchMLEgress, then the original is dropped. */
static __always_inline int multicast_result(struct __sk_buff *skb, struct address_headers *hdr, __u32 group_id,
					    __u32 job_id)
{
	struct mc_group *group = bpf_map_lookup_elem(&mc_group, &group_id);

	if (!group)
		return TC_ACT_SHOT;
	for (__u32 i = 0; i < MC_MAX_REPLICAS; i++) {
		if (i >= group->num_replicas)
			break;
		struct replica copy = group->replicas[i];

		if (!switchml_egress_result(skb, hdr, job_id, copy.rid))
			continue;
		__u32 ifindex = ifindex_of(copy.port);

		if (ifindex)
			bpf_clone_redirect(skb, ifindex, 0);
	}
	return TC_ACT_SHOT;
}

/* Flood (l2_flood): every port of the flood group but the one the frame came in on
 * (SwitchMLEgress step 2). */
static __always_inline int flood(struct __sk_buff *skb, __u32 in_port, __u32 wire_bytes)
{
	__u32 group_id = SWITCHML_FLOOD_MCAST_GRP;
	struct mc_group *group = bpf_map_lookup_elem(&mc_group, &group_id);

	if (!group)
		return TC_ACT_SHOT;
	for (__u32 i = 0; i < MC_MAX_REPLICAS; i++) {
		if (i >= group->num_replicas)
			break;
		__u32 port = group->replicas[i].port;

		if (port == in_port || !switchml_egress_forward(wire_bytes))
			continue;
		__u32 ifindex = ifindex_of(port);

		if (ifindex)
			bpf_clone_redirect(skb, ifindex, 0);
	}
	return TC_ACT_SHOT;
}

/* ---- SwitchMLIngress step 2: L2 forwarding ---------------------------------------------- */

/* The l2_learn digest, answered here as the learning controller answers it for bmv2:
 * l2_learn_table gets the source (NoAction) and, unless it is there, l2_table a
 * forward to the port it came in on. A full table (-E2BIG) takes nothing: the frame is
 * counted as not learned (EV_L2_NOT_LEARNED); -EEXIST is a source another core just
 * learned, or a static entry, and is not counted. */
static __always_inline void l2_learn(__u64 src, __u32 in_port, __u32 wire_bytes)
{
	struct l2_learn_action known = {.action = L2_LEARN_TABLE_NOACTION};
	struct l2_action forward = {.action = L2_TABLE_L2_FORWARD, .port = in_port};

	if (bpf_map_update_elem(&l2_learn_table, &src, &known, BPF_NOEXIST) == -E2BIG ||
	    bpf_map_update_elem(&l2_table, &src, &forward, BPF_NOEXIST) == -E2BIG)
		count(&event_counter, EV_L2_NOT_LEARNED, wire_bytes);
}

/* SwitchMLComputeChecksum for a frame that leaves as it came: an option-less IPv4 header
 * that the parser extracted (untagged, etherType 0x0800, all 20 bytes there). */
static __always_inline void compute_checksum_forwarded(struct __sk_buff *skb, const struct headers *hdr, __u32 parsed)
{
	if (parsed < ETH_HLEN + sizeof(struct iphdr) || hdr->ethernet.h_proto != bpf_htons(ETH_P_IP) || hdr->ipv4.ihl != 5)
		return;
	__be16 check = ipv4_checksum(&hdr->ipv4);

	if (check != hdr->ipv4.check)
		bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, check), &check, sizeof(check), 0);
}

static __always_inline int l2_forward(struct __sk_buff *skb, const struct headers *hdr, __u32 parsed, __u32 in_port,
				      __u32 wire_bytes)
{
	__u64 src = mac_key(hdr->ethernet.h_source);
	__u64 dst = mac_key(hdr->ethernet.h_dest);
	__u32 zero = 0;
	/* l2_table is looked up before the learn digest is answered: a controller answers it
	 * only after the packet, so a frame to its own, not yet learned, source is flooded. */
	struct l2_action *l2 = bpf_map_lookup_elem(&l2_table, &dst);

	if (!l2)
		l2 = bpf_map_lookup_elem(&l2_table_default, &zero);
	struct l2_action decision = l2 ? *l2 : (struct l2_action){.action = L2_TABLE_L2_FLOOD};
	struct l2_learn_action *learn = bpf_map_lookup_elem(&l2_learn_table, &src);

	if (!learn)
		learn = bpf_map_lookup_elem(&l2_learn_table_default, &zero);
	if (learn && learn->action == L2_LEARN_TABLE_L2_LEARN)
		l2_learn(src, in_port, wire_bytes);

	count(&event_counter, EV_FORWARDED, wire_bytes);
	compute_checksum_forwarded(skb, hdr, parsed);
	if (decision.action == L2_TABLE_L2_FORWARD)
		return switchml_egress_forward(wire_bytes) ? to_port(decision.port) : TC_ACT_SHOT;
	return flood(skb, in_port, wire_bytes);
}

/* ---- SwitchMLIngress step 1b: ARP and ICMP echo for the switch's own address ------------ */

/* arp_h (p4/switchml/include/headers.p4): ARP for IPv4 over Ethernet. */
struct arp_h {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 oper;
	unsigned char sha[ETH_ALEN];
	__be32 spa;
	unsigned char tha[ETH_ALEN];
	__be32 tpa;
} __attribute__((packed));

/* icmp_h: the first four bytes of an ICMP message. */
struct icmp_h {
	__u8 type;
	__u8 code;
	__be16 checksum;
} __attribute__((packed));

/* What an echo reply rewrites before the ICMP header: Ethernet + IPv4. */
struct ipv4_headers {
	struct ethhdr ethernet;
	struct iphdr ipv4;
} __attribute__((packed));

#define ARP_OFFSET ETH_HLEN
#define ICMP_OFFSET (ETH_HLEN + sizeof(struct iphdr))
#define IPV4_MF_AND_OFFSET 0x3FFF
/* ~m of RFC 1624 eqn. 3: the echo request's type and code word, 0x0800, complemented. */
#define OLD_TYPE_CODE_COMPLEMENT ((__u16)~(SWITCHML_ICMP_ECHO_REQUEST << 8))

/* switch_addr_table's MAC for ``ipv4`` (host order) into ``mac``; 0 if not the switch's. */
static __always_inline int switch_mac(__u32 ipv4, unsigned char *mac)
{
	__u32 zero = 0;
	struct switch_addr_action *entry = bpf_map_lookup_elem(&switch_addr_table, &ipv4);

	if (!entry)
		entry = bpf_map_lookup_elem(&switch_addr_table_default, &zero);
	if (!entry || entry->action != SWITCH_ADDR_TABLE_SET_SWITCH_MAC)
		return 0;
	mac_bytes(mac, entry->mac);
	return 1;
}

/* arp_reply(): the request for the switch's address becomes its reply in place. */
static __always_inline int arp_reply(struct __sk_buff *skb, const struct headers *hdr)
{
	struct arp_h arp;
	struct ethhdr eth;

	if (bpf_skb_load_bytes(skb, ARP_OFFSET, &arp, sizeof(arp)))
		return 0;
	if (arp.htype != bpf_htons(1) || arp.ptype != bpf_htons(ETH_P_IP) || arp.hlen != ETH_ALEN || arp.plen != 4 ||
	    arp.oper != bpf_htons(SWITCHML_ARP_REQUEST))
		return 0;
	__be32 own = arp.tpa;

	if (!switch_mac(bpf_ntohl(own), eth.h_source))
		return 0;
	__builtin_memcpy(eth.h_dest, hdr->ethernet.h_source, ETH_ALEN);
	eth.h_proto = hdr->ethernet.h_proto;
	arp.oper = bpf_htons(SWITCHML_ARP_REPLY);
	__builtin_memcpy(arp.tha, arp.sha, ETH_ALEN);
	arp.tpa = arp.spa;
	__builtin_memcpy(arp.sha, eth.h_source, ETH_ALEN);
	arp.spa = own;
	return !bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) && !bpf_skb_store_bytes(skb, ARP_OFFSET, &arp, sizeof(arp), 0);
}

/* icmp_echo_reply(): the echo request to the switch's address becomes its reply in place:
 * addresses swapped (from the switch's MAC), type 0, the ICMP checksum updated (RFC 1624
 * eqn. 3), the IPv4 checksum recomputed. */
static __always_inline int icmp_echo_reply(struct __sk_buff *skb, const struct headers *hdr)
{
	struct ipv4_headers reply;
	struct icmp_h icmp;

	if (bpf_skb_load_bytes(skb, ICMP_OFFSET, &icmp, sizeof(icmp)))
		return 0;
	if (icmp.type != SWITCHML_ICMP_ECHO_REQUEST || icmp.code != 0 ||
	    (bpf_ntohs(hdr->ipv4.frag_off) & IPV4_MF_AND_OFFSET))
		return 0;
	if (!switch_mac(bpf_ntohl(hdr->ipv4.daddr), reply.ethernet.h_source))
		return 0;
	__builtin_memcpy(reply.ethernet.h_dest, hdr->ethernet.h_source, ETH_ALEN);
	reply.ethernet.h_proto = hdr->ethernet.h_proto;
	__builtin_memcpy(&reply.ipv4, &hdr->ipv4, sizeof(reply.ipv4));
	reply.ipv4.saddr = hdr->ipv4.daddr;
	reply.ipv4.daddr = hdr->ipv4.saddr;
	reply.ipv4.check = ipv4_checksum(&reply.ipv4);
	__u32 sum = (__u16)~bpf_ntohs(icmp.checksum) + (__u32)OLD_TYPE_CODE_COMPLEMENT;

	sum = (sum & 0xFFFF) + (sum >> 16);
	icmp.type = SWITCHML_ICMP_ECHO_REPLY;
	icmp.checksum = bpf_htons(~sum & 0xFFFF);
	return !bpf_skb_store_bytes(skb, 0, &reply, sizeof(reply), 0) &&
	       !bpf_skb_store_bytes(skb, ICMP_OFFSET, &icmp, sizeof(icmp), 0);
}

/* Step 1b: an ARP request for, or an ICMP echo request (code 0, not a fragment) to, an
 * address of switch_addr_table is answered out of the ingress port, through SwitchMLEgress;
 * 1 with the verdict in ``verdict``, 0 for any other frame (left untouched: ordinary
 * traffic). ``parsed`` bytes of ``hdr`` are the frame's (parse()). */
static __always_inline int answer_own_address(struct __sk_buff *skb, const struct headers *hdr, __u32 parsed,
					      __u32 in_port, __u32 wire_bytes, int *verdict)
{
	__u32 event;

	if (skb->vlan_present || parsed < ETH_HLEN)
		return 0;
	if (hdr->ethernet.h_proto == bpf_htons(SWITCHML_ETHERTYPE_ARP) && skb->len >= ARP_OFFSET + sizeof(struct arp_h)) {
		if (!arp_reply(skb, hdr))
			return 0;
		event = EV_ARP_REPLY;
	} else if (hdr->ethernet.h_proto == bpf_htons(ETH_P_IP) && parsed >= ICMP_OFFSET &&
		   skb->len >= ICMP_OFFSET + sizeof(struct icmp_h) && hdr->ipv4.ihl == 5 &&
		   hdr->ipv4.protocol == SWITCHML_IPPROTO_ICMP) {
		if (!icmp_echo_reply(skb, hdr))
			return 0;
		event = EV_ICMP_ECHO_REPLY;
	} else {
		return 0;
	}
	count(&event_counter, event, wire_bytes);
	*verdict = switchml_egress_forward(wire_bytes) ? to_port(in_port) : TC_ACT_SHOT;
	return 1;
}

/* ---- SwitchMLIngress step 6: aggregation ------------------------------------------------ */

/* Step 5b: the slot is beyond the job's pool, or its cell past the registers (an entry the
 * control plane should have refused): no register cell of this job to aggregate in. */
static __always_inline int outside_pool(__u32 slot, __u32 slot_base, __u32 pool_size)
{
	return slot >= pool_size || slot_base + slot >= SWITCHML_MAX_POOL_SIZE;
}

/* Serial-number order on 32 bits: a is newer than b. */
static __always_inline int newer(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

enum aggregation_outcome {
	STALE,
	CONSUMED,
	COMPLETED,
	RETX_COMPLETE,
	RETX_IGNORED,
	PARTIAL_UP,
};

struct update {
	__u32 rank_bit;
	__u32 num_workers;
	__u32 complete; /* the count at which the cell holds the result: num_workers (+ 1 with an uplink) */
	__u32 seq;
	__s8 exponent;
	__u32 shadow_set;
};

/* Step 6 on one slot, under its lock. ``data`` holds the update's elements (as on the
 * wire) and leaves holding the slot's values whenever a result is due; ``exponent`` the max. */
static __always_inline enum aggregation_outcome aggregate(struct slot_cells *slot, const struct update *u,
							  struct switchml_data *data, __u8 *exponent)
{
	enum aggregation_outcome outcome;
	struct register_cell *cell = &slot->set[u->shadow_set & 1];
	struct register_cell *other = &slot->set[(u->shadow_set & 1) ^ 1];
	__u32 b;
	int is_new, stale;

	bpf_spin_lock(&slot->lock);
	b = cell->bitmap;
	is_new = (b & u->rank_bit) == 0;
	/* 6a. Stale: an update of an older version than the one this cell holds. */
	if (is_new && b == 0)
		stale = cell->count != 0 && !newer(u->seq, cell->seq);
	else if (is_new)
		stale = u->seq != cell->seq || cell->count >= u->num_workers;
	else
		stale = u->seq != cell->seq;

	if (stale) {
		outcome = STALE;
	} else if (is_new) {
		/* A new contribution; clearing the rank from the other set readies that set
		 * for this worker's next chunk. */
		cell->bitmap = b | u->rank_bit;
		other->bitmap &= ~u->rank_bit;
		if (b == 0) {
			/* First contribution of this version: overwrite. */
#pragma unroll
			for (int i = 0; i < SWITCHML_K; i++)
				cell->value[i] = bpf_ntohl(data->d[i]);
			cell->exponent = (__u8)u->exponent;
			cell->count = 1;
			cell->seq = u->seq;
		} else {
#pragma unroll
			for (int i = 0; i < SWITCHML_K; i++) {
				cell->value[i] += bpf_ntohl(data->d[i]); /* wrapping 32-bit add */
				data->d[i] = bpf_htonl(cell->value[i]);
			}
			if (u->exponent > (__s8)cell->exponent)
				cell->exponent = (__u8)u->exponent;
			cell->count += 1;
		}
		*exponent = cell->exponent;
		if (cell->count != u->num_workers)
			outcome = CONSUMED;
		else /* complete here: the sum goes up, or out to the workers */
			outcome = u->complete != u->num_workers ? PARTIAL_UP : COMPLETED;
	} else if (cell->count == u->complete || (cell->count == u->num_workers && u->complete != u->num_workers)) {
		/* A retransmission to a complete version: send the stored result back. Or, with
		 * an uplink and the result from above missing: send the partial sum up again. */
#pragma unroll
		for (int i = 0; i < SWITCHML_K; i++)
			data->d[i] = bpf_htonl(cell->value[i]);
		*exponent = cell->exponent;
		outcome = cell->count == u->complete ? RETX_COMPLETE : PARTIAL_UP;
	} else {
		outcome = RETX_IGNORED;
	}
	bpf_spin_unlock(&slot->lock);
	return outcome;
}

/* 6R under the slot's lock: the result from above completes the version this switch sent
 * its partial sum up for (count == num_workers, same seq); it is kept (count one more) to
 * answer retransmissions. 1 if it did, 0 for an old or repeated copy. */
static __always_inline int store_result_from_above(struct slot_cells *slot, __u32 shadow_set, __u32 seq, __u32 num_workers,
						   const struct switchml_data *data, __u8 exponent)
{
	struct register_cell *cell = &slot->set[shadow_set & 1];
	int fresh;

	bpf_spin_lock(&slot->lock);
	fresh = cell->count == num_workers && cell->seq == seq;
	if (fresh) {
#pragma unroll
		for (int i = 0; i < SWITCHML_K; i++)
			cell->value[i] = bpf_ntohl(data->d[i]);
		cell->exponent = exponent;
		cell->count = num_workers + 1;
	}
	bpf_spin_unlock(&slot->lock);
	return fresh;
}

/* The packet's k elements (switchml_data_h) in this core's scratch cell, or NULL. */
static __always_inline struct switchml_data *load_elements(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct switchml_data *data = bpf_map_lookup_elem(&scratch, &zero);

	if (!data || bpf_skb_load_bytes(skb, DATA_OFFSET, data, sizeof(*data)))
		return NULL;
	return data;
}

/* Cut a frame to an update's or result's size (trailer bytes are not part of it). */
static __always_inline int cut_to_frame_bytes(struct __sk_buff *skb)
{
	return skb->len > SWITCHML_FRAME_BYTES ? bpf_skb_change_tail(skb, SWITCHML_FRAME_BYTES, 0) : 0;
}

/* send_up(): the local partial sum (data) leaves as this switch's update to the switch
 * above, through SwitchMLEgress's drop simulator. */
static __always_inline int send_up(struct __sk_buff *skb, const struct headers *hdr, const struct uplink_action *uplink,
				   const struct switchml_data *data, __u8 exponent)
{
	struct address_headers up;

	if (cut_to_frame_bytes(skb) ||
	    bpf_skb_store_bytes(skb, DATA_OFFSET, data, sizeof(*data), 0) ||
	    bpf_skb_store_bytes(skb, SWITCHML_OFFSET + offsetof(struct switchml_h, exponent), &exponent, 1, 0))
		return TC_ACT_SHOT;
	__builtin_memcpy(&up, hdr, sizeof(up));
	mac_bytes(up.ethernet.h_dest, uplink->dst_mac);
	mac_bytes(up.ethernet.h_source, uplink->src_mac);
	up.ipv4.saddr = bpf_htonl(uplink->src_ipv4);
	up.ipv4.daddr = bpf_htonl(uplink->dst_ipv4);
	up.udp.check = 0;
	up.ipv4.check = ipv4_checksum(&up.ipv4);
	if (bpf_skb_store_bytes(skb, 0, &up, sizeof(up), 0))
		return TC_ACT_SHOT;
	return switchml_egress_forward(SWITCHML_FRAME_BYTES) ? to_port(uplink->port) : TC_ACT_SHOT;
}

/* make_result(): the update becomes its result in place. Ingress writes msg_type,
 * exponent and the elements; the address headers answer from the address the worker sent
 * to (egress adds the destination per copy); a result is exactly SWITCHML_FRAME_BYTES. */
static __always_inline int make_result(struct __sk_buff *skb, const struct headers *hdr, struct address_headers *result,
				       const struct switchml_data *data, __u8 exponent)
{
	__u8 msg_type = SWITCHML_MSG_RESULT;

	if (cut_to_frame_bytes(skb))
		return -1;
	if (bpf_skb_store_bytes(skb, DATA_OFFSET, data, sizeof(*data), 0) ||
	    bpf_skb_store_bytes(skb, SWITCHML_OFFSET + offsetof(struct switchml_h, msg_type), &msg_type, 1, 0) ||
	    bpf_skb_store_bytes(skb, SWITCHML_OFFSET + offsetof(struct switchml_h, exponent), &exponent, 1, 0))
		return -1;
	__builtin_memcpy(result, hdr, sizeof(*result));
	__builtin_memcpy(result->ethernet.h_source, hdr->ethernet.h_dest, ETH_ALEN);
	result->ipv4.saddr = hdr->ipv4.daddr;
	result->udp.source = hdr->udp.dest;
	result->udp.check = 0;
	return 0;
}

/* Step 6 for an update from a known worker of its job: the cell is
 * registers[slot_base + slot].set[shadow_set] (idx = shadow_set * SWITCHML_MAX_POOL_SIZE +
 * slot_base + slot), the other set's cell is beside it. The outcome is counted, and a
 * result multicast to the job's group or unicast to the sender. */
static __always_inline int switchml_aggregate(struct __sk_buff *skb, const struct headers *hdr, __u32 in_port,
					      const struct worker_action *worker, const struct uplink_action *uplink,
					      __u32 wire_bytes)
{
	const struct switchml_h *sml = &hdr->switchml;
	__u32 slot_index = worker->slot_base + bpf_ntohs(sml->slot);
	struct slot_cells *slot = bpf_map_lookup_elem(&registers, &slot_index);
	struct switchml_data *data = load_elements(skb);
	struct address_headers result;
	__u8 exponent = 0;

	if (!slot || !data)
		return TC_ACT_SHOT;

	struct update u = {
		.rank_bit = worker->rank < 32 ? 1u << worker->rank : 0,
		.num_workers = worker->num_workers,
		.complete = uplink ? worker->num_workers + 1 : worker->num_workers,
		.seq = bpf_ntohl(sml->seq),
		.exponent = (__s8)sml->exponent,
		.shadow_set = sml->shadow_set,
	};

	switch (aggregate(slot, &u, data, &exponent)) {
	case STALE:
		count(&event_counter, EV_DROP_STALE, wire_bytes);
		return TC_ACT_SHOT;
	case CONSUMED:
		count(&event_counter, EV_UPDATE_CONSUMED, wire_bytes);
		return TC_ACT_SHOT;
	case RETX_IGNORED:
		count(&event_counter, EV_RETX_IGNORED, wire_bytes);
		return TC_ACT_SHOT;
	case PARTIAL_UP:
		/* Complete here (or asked again): the partial sum goes to the switch above. */
		count(&event_counter, EV_PARTIAL_UP, wire_bytes);
		return uplink ? send_up(skb, hdr, uplink, data, exponent) : TC_ACT_SHOT;
	case COMPLETED:
		/* Complete: multicast the result to the job's group. */
		count(&event_counter, EV_RESULT_MULTICAST, wire_bytes);
		if (make_result(skb, hdr, &result, data, exponent))
			return TC_ACT_SHOT;
		return multicast_result(skb, &result, worker->mcast_grp, worker->job_id);
	case RETX_COMPLETE:
		/* Unicast the stored result back to the sender: egress_spec = ingress_port,
		 * meta.dst_rank = meta.rank. */
		count(&event_counter, EV_RESULT_UNICAST, wire_bytes);
		if (make_result(skb, hdr, &result, data, exponent))
			return TC_ACT_SHOT;
		return switchml_egress_result(skb, &result, worker->job_id, worker->rank) ? to_port(in_port) : TC_ACT_SHOT;
	}
	return TC_ACT_SHOT;
}

/* 4R-6R: a result from the job's uplink (its port, from the upper switch's address): kept
 * in the cell the partial sum went up from, and multicast to the job's workers as it came
 * (from the upper switch's address; egress writes each worker's). */
static __always_inline int result_from_above(struct __sk_buff *skb, const struct headers *hdr, __u32 in_port,
					     __u32 wire_bytes)
{
	const struct switchml_h *sml = &hdr->switchml;
	__u32 job_id = bpf_ntohs(sml->job_id);
	struct uplink_action *uplink = bpf_map_lookup_elem(&uplink_table, &job_id);
	struct address_headers result;

	if (!uplink || uplink->action != UPLINK_TABLE_SET_UPLINK || in_port != uplink->port ||
	    bpf_ntohl(hdr->ipv4.saddr) != uplink->dst_ipv4) {
		count(&event_counter, EV_DROP_MALFORMED, wire_bytes);
		return TC_ACT_SHOT;
	}
	if (outside_pool(bpf_ntohs(sml->slot), uplink->slot_base, uplink->pool_size)) {
		count(&event_counter, EV_DROP_OUTSIDE_POOL, wire_bytes);
		return TC_ACT_SHOT;
	}
	__u32 slot_index = uplink->slot_base + bpf_ntohs(sml->slot);
	struct slot_cells *slot = bpf_map_lookup_elem(&registers, &slot_index);
	struct switchml_data *data = load_elements(skb);

	if (!slot || !data)
		return TC_ACT_SHOT;
	if (!store_result_from_above(slot, sml->shadow_set, bpf_ntohl(sml->seq), uplink->num_workers, data, sml->exponent)) {
		count(&event_counter, EV_DROP_STALE, wire_bytes);
		return TC_ACT_SHOT;
	}
	count(&event_counter, EV_RESULT_MULTICAST, wire_bytes);
	if (cut_to_frame_bytes(skb))
		return TC_ACT_SHOT;
	__builtin_memcpy(&result, hdr, sizeof(result));
	result.udp.check = 0;
	return multicast_result(skb, &result, uplink->mcast_grp, job_id);
}

/* ---- SwitchMLParser --------------------------------------------------------------------- */

enum parsed_as {
	ORDINARY,     /* not to an aggregation port (or tagged, or too short for UDP) */
	SWITCHML,     /* switchml_h + data extracted */
	PARSER_ERROR, /* to an aggregation port, too short for switchml_h + k elements */
};

/* The headers up to switchml_h into ``hdr`` (as far as the frame has them; ``parsed``
 * says how many bytes), and what the parser made of the frame. The frame is seen as on
 * the wire: the kernel holds an 802.1Q tag in the skb's metadata, and a tagged frame's
 * etherType on the wire is 0x8100, so it is ordinary traffic. */
static __always_inline enum parsed_as parse(struct __sk_buff *skb, struct headers *hdr, __u32 *parsed)
{
	__u32 len = skb->len;

	*parsed = 0;
	if (skb->vlan_present) {
		if (bpf_skb_load_bytes(skb, 0, hdr, ETH_HLEN))
			return ORDINARY;
		*parsed = ETH_HLEN;
		return ORDINARY;
	}
	if (len >= sizeof(*hdr)) {
		if (bpf_skb_load_bytes(skb, 0, hdr, sizeof(*hdr)))
			return ORDINARY;
		*parsed = sizeof(*hdr);
	} else if (len >= SWITCHML_OFFSET) {
		if (bpf_skb_load_bytes(skb, 0, hdr, SWITCHML_OFFSET))
			return ORDINARY;
		*parsed = SWITCHML_OFFSET;
	} else if (len >= ETH_HLEN + sizeof(struct iphdr)) {
		if (bpf_skb_load_bytes(skb, 0, hdr, ETH_HLEN + sizeof(struct iphdr)))
			return ORDINARY;
		*parsed = ETH_HLEN + sizeof(struct iphdr);
		return ORDINARY;
	} else if (len >= ETH_HLEN) {
		if (bpf_skb_load_bytes(skb, 0, hdr, ETH_HLEN))
			return ORDINARY;
		*parsed = ETH_HLEN;
		return ORDINARY;
	} else {
		return ORDINARY;
	}
	if (hdr->ethernet.h_proto != bpf_htons(ETH_P_IP) || hdr->ipv4.ihl != 5 ||
	    hdr->ipv4.protocol != IPPROTO_UDP ||
	    (bpf_ntohs(hdr->udp.dest) & SWITCHML_UDP_PORT_MASK) != SWITCHML_UDP_PORT_BASE)
		return ORDINARY;
	return len >= SWITCHML_FRAME_BYTES ? SWITCHML : PARSER_ERROR;
}

/* ---- SwitchMLIngress -------------------------------------------------------------------- */

SEC("tc")
int switchml_ingress(struct __sk_buff *skb)
{
	struct headers hdr = {};
	__u32 parsed;
	__u32 ifindex = skb->ifindex;
	__u32 *port = bpf_map_lookup_elem(&port_of_ifindex, &ifindex);
	/* Counters count the frame as it was on the wire, tag included. */
	__u32 wire_bytes = skb->len + (skb->vlan_present ? VLAN_TAG_BYTES : 0);

	if (!port)
		return TC_ACT_OK; /* not a port of this switch: leave it to the kernel */
	__u32 in_port = *port;

	/* 1. Drop simulator (ingress): every packet. */
	if (drop_simulator(&ingress_drop_threshold)) {
		count(&event_counter, EV_DROP_SIM_INGRESS, wire_bytes);
		return TC_ACT_SHOT;
	}
	if (skb->len < ETH_HLEN) { /* not even an Ethernet header (as the embedded switch) */
		count(&event_counter, EV_DROP_MALFORMED, wire_bytes);
		return TC_ACT_SHOT;
	}
	enum parsed_as parsed_as = parse(skb, &hdr, &parsed);

	if (parsed_as == ORDINARY) {
		int verdict;

		/* 1b. ARP or ICMP echo for the switch's own address: answered. */
		if (answer_own_address(skb, &hdr, parsed, in_port, wire_bytes, &verdict))
			return verdict;
		/* 2. Not a SwitchML update: L2 forwarding. */
		return l2_forward(skb, &hdr, parsed, in_port, wire_bytes);
	}

	/* 3. Malformed: truncated, wrong k, not an update, bad set or slot. */
	const struct switchml_h *sml = &hdr.switchml;

	if (parsed_as == PARSER_ERROR || bpf_ntohs(sml->num_elements) != SWITCHML_K ||
	    bpf_ntohs(hdr.udp.len) != SWITCHML_UDP_LENGTH ||
	    (sml->msg_type != SWITCHML_MSG_UPDATE && sml->msg_type != SWITCHML_MSG_RESULT) || sml->shadow_set > 1 ||
	    bpf_ntohs(sml->slot) >= SWITCHML_MAX_POOL_SIZE) {
		count(&event_counter, EV_DROP_MALFORMED, wire_bytes);
		return TC_ACT_SHOT;
	}
	if (sml->msg_type == SWITCHML_MSG_RESULT)
		return result_from_above(skb, &hdr, in_port, wire_bytes);

	/* 4. worker_table: the rank comes from (ingress port, source IPv4), never the packet. */
	struct worker_key key = {.ingress_port = in_port, .src_addr = bpf_ntohl(hdr.ipv4.saddr)};
	__u32 zero = 0;
	struct worker_action *worker = bpf_map_lookup_elem(&worker_table, &key);

	if (!worker)
		worker = bpf_map_lookup_elem(&worker_table_default, &zero);
	if (!worker)
		return TC_ACT_SHOT;
	if (worker->action == WORKER_TABLE_FORWARD_AS_ORDINARY)
		return l2_forward(skb, &hdr, parsed, in_port, wire_bytes);
	if (worker->action != WORKER_TABLE_SET_WORKER) {
		count(&event_counter, EV_DROP_UNKNOWN_SENDER, wire_bytes);
		return TC_ACT_SHOT;
	}

	/* 5. Not the sender's job. */
	if (bpf_ntohs(sml->job_id) != worker->job_id) {
		count(&event_counter, EV_DROP_WRONG_JOB, wire_bytes);
		return TC_ACT_SHOT;
	}

	/* The job's uplink, if it is aggregated further up. */
	__u32 job_id = worker->job_id;
	struct uplink_action *uplink = bpf_map_lookup_elem(&uplink_table, &job_id);

	if (uplink && uplink->action != UPLINK_TABLE_SET_UPLINK)
		uplink = NULL;

	/* 5b. Beyond the job's slot range (other jobs' cells), or past the registers. */
	if (outside_pool(bpf_ntohs(sml->slot), worker->slot_base, worker->pool_size)) {
		count(&event_counter, EV_DROP_OUTSIDE_POOL, wire_bytes);
		return TC_ACT_SHOT;
	}

	/* 6. Aggregation. */
	return switchml_aggregate(skb, &hdr, in_port, worker, uplink, wire_bytes);
}

char _license[] SEC("license") = "Dual BSD/GPL";
