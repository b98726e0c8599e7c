/*
 * tc_switch.h -- what every TC program of the eBPF target shares (switchml/switchml.bpf.c,
 * atp/atp.bpf.c), whatever protocol it aggregates: the traffic manager's multicast maps and
 * their limits, the switch's port wiring, the counter and threshold cells, the drop
 * simulator (its two threshold maps and its draw), and the helpers for MAC keys, the IPv4
 * header checksum and sending a frame to a port.
 *
 * The control plane's side of the same layouts is switches/ebpf/map_control.py (tables,
 * multicast groups, counters) and switches/ebpf/loader.py (the port wiring), which read the
 * limits below from this file: plain "#define NAME number" lines, as protocol/params.py
 * reads constants.p4.
 */
#ifndef EBPF_TC_SWITCH_H
#define EBPF_TC_SWITCH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* The traffic manager's multicast groups: copies per group, nodes per group, ports per
 * node, groups, and node handles. A flood group holds every port of the switch; an ATP
 * job's result group one copy per worker (at most its MAX_WORKERS). */
#define MC_MAX_REPLICAS 64
#define MC_MAX_NODES 64
#define MC_MAX_NODE_PORTS 64
#define MC_MAX_GROUPS 64
#define MC_MAX_NODE_HANDLES 1024

/* Port numbers are bit<9>, as in v1model: ifindex_of_port (and ATP's phantom_queue) have one
 * cell per number. */
#define PORT_NUMBERS 512

/* ---- counters and thresholds ------------------------------------------------------------- */

struct counter_cell {
	__u64 packets;
	__u64 bytes;
};

/* A one-cell register: a drop simulator's threshold, ATP's ecn_threshold. */
struct threshold {
	__u32 value;
};

/* ---- drop simulator ---------------------------------------------------------------------- */

/* Loss where the kernel has no netem: every program's ingress drops a frame on arrival, and
 * its egress a copy about to leave, when random(draw, 0, 0xFFFFFFFE) is below the threshold
 * (<Ingress>.ingress_drop_threshold, <Egress>.egress_drop_threshold; switches/drop_simulator.py). */
#define DROP_DRAW_VALUES 0xFFFFFFFF /* random(draw, 0, 0xFFFFFFFE): 2^32 - 1 values */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct threshold);
} ingress_drop_threshold SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct threshold);
} egress_drop_threshold SEC(".maps");

/* A drop simulator's threshold now (0, never dropping, if the map has none). */
static __always_inline __u32 drop_threshold(void *threshold_map)
{
	__u32 zero = 0;
	struct threshold *threshold = bpf_map_lookup_elem(threshold_map, &zero);

	return threshold ? threshold->value : 0;
}

/* random(meta.drop_draw, 0, 0xFFFFFFFE) < threshold: 1 to drop. Threshold 0 never drops and
 * draws nothing; the draws cannot be seeded. */
static __always_inline int drop_draw(__u32 threshold)
{
	return threshold != 0 && bpf_get_prandom_u32() % DROP_DRAW_VALUES < threshold;
}

/* The drop simulator of either side, for one frame: drop_draw against the map's threshold. */
static __always_inline int drop_simulator(void *threshold_map)
{
	return drop_draw(drop_threshold(threshold_map));
}

/* ---- traffic manager ------------------------------------------------------------------- */

/* A multicast group: the node handles the control plane associated (its bookkeeping) and
 * the copies they make, (rid, port) in association order (what the data path reads). */
struct replica {
	__u16 rid;
	__u16 port;
};

struct mc_group {
	__u32 num_nodes;
	__u32 nodes[MC_MAX_NODES];
	__u32 num_replicas;
	struct replica replicas[MC_MAX_REPLICAS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MC_MAX_GROUPS);
	__type(key, __u32);
	__type(value, struct mc_group);
} mc_group SEC(".maps");

/* A multicast node (mc_node_create): its rid and ports. Only the control plane reads it. */
struct mc_node {
	__u32 rid;
	__u32 num_ports;
	__u16 ports[MC_MAX_NODE_PORTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MC_MAX_NODE_HANDLES);
	__type(key, __u32);
	__type(value, struct mc_node);
} mc_node SEC(".maps");

/* The switch's wiring (bmv2's -i PORT@IFACE): port number <-> interface index
 * (switches/ebpf/loader.py writes it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PORT_NUMBERS);
	__type(key, __u32);   /* ifindex */
	__type(value, __u32); /* port */
} port_of_ifindex SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_NUMBERS);
	__type(key, __u32);   /* port */
	__type(value, __u32); /* ifindex; 0: no interface */
} ifindex_of_port SEC(".maps");

/* ---- helpers ------------------------------------------------------------------------------ */

static __always_inline void count(void *counter, __u32 index, __u32 bytes)
{
	struct counter_cell *cell = bpf_map_lookup_elem(counter, &index);

	if (cell) {
		cell->packets += 1;
		cell->bytes += bytes;
	}
}

/* A MAC address as the tables key it: a host-order 48-bit integer. */
static __always_inline __u64 mac_key(const unsigned char *mac)
{
	return (__u64)mac[0] << 40 | (__u64)mac[1] << 32 | (__u64)mac[2] << 24 | (__u64)mac[3] << 16 |
	       (__u64)mac[4] << 8 | (__u64)mac[5];
}

static __always_inline void mac_bytes(unsigned char *mac, __u64 key)
{
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		mac[i] = key >> (8 * (ETH_ALEN - 1 - i));
}

/* The ComputeChecksum control of every program: csum16 over the 20-byte IPv4 header, its
 * checksum field as zero (network byte order, like the field). */
static __always_inline __be16 ipv4_checksum(const void *ipv4)
{
	const __u8 *byte = ipv4;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)sizeof(struct iphdr); i += 2)
		if (i != offsetof(struct iphdr, check))
			sum += (__u32)byte[i] << 8 | byte[i + 1];
	sum = (sum & 0xFFFF) + (sum >> 16);
	sum = (sum & 0xFFFF) + (sum >> 16);
	return bpf_htons(~sum & 0xFFFF);
}

static __always_inline __u32 ifindex_of(__u32 port)
{
	__u32 *ifindex = bpf_map_lookup_elem(&ifindex_of_port, &port);

	return ifindex ? *ifindex : 0;
}

/* A frame to a port: redirect it to that port's egress, or drop it if no interface is
 * wired to the port (egress has already counted it, as the embedded switch does). */
static __always_inline int to_port(__u32 port)
{
	__u32 ifindex = ifindex_of(port);

	return ifindex ? bpf_redirect(ifindex, 0) : TC_ACT_SHOT;
}

#endif
