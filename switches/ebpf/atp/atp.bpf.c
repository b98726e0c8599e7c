/*
 * atp.bpf.c -- ATP's data plane of docs/dataplane-atp.md as one TC (clsact, direct-action)
 * program, attached to the ingress of every switch port.
 *
 * Read it beside switches/embedded/atp/ (the reference pipeline every ATP target mirrors):
 * the maps carry its table, register and counter names, the steps the numbers of
 * docs/dataplane-atp.md ("ATPIngress"). One program runs the whole pipeline for a frame:
 *
 *   ATPParser             parse()
 *   ATPIngress            atp_ingress(), steps 0-8 and R (aggregate() and result() under
 *                         the aggregator's lock)
 *   traffic manager       multicast_result(), flood(): one bpf_clone_redirect per copy
 *   ATPEgress             egress_*(), per copy: the drop simulator, worker_addr_table, the
 *                         phantom queue's ECN
 *   ATPComputeChecksum    ipv4_checksum()
 *
 * Concurrency: the kernel runs this program on every core at once. A packet's
 * read-modify-write of one aggregator (owner tag, bitmap, count, ecn, k values) runs under
 * the bpf_spin_lock in the aggregator's map value: the serial order per aggregator that a
 * P4 switch's @atomic action gives. The verifier allows no helper calls under the lock,
 * so the k values are loaded into a per-CPU scratch cell before and stored after.
 *
 * ECN: TC sees no queue (a frame the program redirects is queued later, in the port's
 * qdisc, and no ECN-marking qdisc loads on this kernel), so each port has a phantom queue:
 * a virtual queue that every departing copy joins and that drains at the port's link rate
 * (phantom_queue.rate_kbps, set by the control plane; 0: no phantom queue, never marks),
 * and that holds no more than the port's real queue (phantom_queue.limit frames): a copy
 * that finds it full adds no work, as the real queue drops it. An ATP copy that finds at
 * least ecn_threshold copies of its size ahead of it leaves marked, as ATPEgress marks from
 * a real queue's depth.
 *
 * Counting: each frame's ingress event is counted last, after every copy it makes has
 * been counted at egress, so a reader who sees the event sees the frame's copies counted.
 *
 * What every program of the target shares (the multicast maps, the port wiring, the
 * counter cells, the drop simulator's maps and draw, mac_key, ipv4_checksum, to_port) is in
 * ../tc_switch.h, as SwitchML's switchml.bpf.c uses it.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "atp_params.h"
#include "atp.h"
#include "tc_switch.h"

#define ATP_OFFSET (ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr))
#define DATA_OFFSET (ATP_OFFSET + sizeof(struct atp_h))
#define ATP_UDP_LENGTH (sizeof(struct udphdr) + sizeof(struct atp_h) + 4 * ATP_K)
#define ATP_FRAME_BYTES (DATA_OFFSET + 4 * ATP_K)
#define VLAN_TAG_BYTES 4
#define IPV4_ECN_CE 0x3
#define NS_PER_BIT_AT_1_KBPS 1000000ull

/* ---- headers (protocol/atp/packet.py) ------------------------------------------------ */

struct atp_h {
	__be32 bitmap;
	__u8 fan_in;
	__u8 flags;
	__be16 app_id;
	__be32 seq;
	__be16 agtr;
	__be16 new_agtr;
} __attribute__((packed));

/* Everything up to the values: what the parser extracts before the data. */
struct headers {
	struct ethhdr ethernet;
	struct iphdr ipv4;
	struct udphdr udp;
	struct atp_h atp;
} __attribute__((packed));

/* ---- ATPIngress state ------------------------------------------------------------------ */

/* The k values of the packet in hand, network byte order; one cell per CPU (a program run
 * is not interrupted on its core by another run). */
struct atp_data {
	__be32 d[ATP_K];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct atp_data);
} scratch SEC(".maps");

/* One aggregator: cell hdr.atp.agtr of the registers owner_app, owner_seq, bitmap, count,
 * ecn and value_00..value_{k-1}, behind one lock. */
struct aggregator {
	struct bpf_spin_lock lock;
	__u32 owner_app;
	__u32 owner_seq; /* 0: free */
	__u32 bitmap;
	__u32 count;
	__u32 ecn;
	__u32 value[ATP_K];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ATP_POOL_SIZE);
	__type(key, __u32);
	__type(value, struct aggregator);
} aggregators SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ATP_INGRESS_EVENTS);
	__type(key, __u32);
	__type(value, struct counter_cell);
} event_counter SEC(".maps");

/* sender_table: (ingress_port, hdr.ipv4.srcAddr) -> set_worker(app_id, worker_id,
 * num_workers, ps_port) | set_ps(app_id, mcast_grp) | drop_unknown_sender (default). */
struct sender_key {
	__u32 ingress_port;
	__u32 src_addr; /* host byte order */
};

struct sender_action {
	__u32 action;
	__u32 app_id;
	__u32 worker_id;
	__u32 num_workers;
	__u32 ps_port;
	__u32 mcast_grp;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ATP_SENDER_TABLE_SIZE);
	__type(key, struct sender_key);
	__type(value, struct sender_action);
} sender_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sender_action);
} sender_table_default SEC(".maps");

/* l2_table: hdr.ethernet.dstAddr (a host-order 48-bit integer) -> l2_forward(port) |
 * l2_flood (default). */
struct l2_action {
	__u32 action;
	__u32 port;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ATP_L2_TABLE_SIZE);
	__type(key, __u64);
	__type(value, struct l2_action);
} l2_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct l2_action);
} l2_table_default SEC(".maps");

/* ---- ATPEgress state ------------------------------------------------------------------- */

/* worker_addr_table: (meta.app_id, standard_metadata.egress_rid) -> set_worker_addr(mac,
 * ipv4, udp_port) | drop (default). */
struct worker_addr_key {
	__u32 app_id;
	__u32 rid;
};

struct worker_addr_action {
	__u32 action;
	__u32 ipv4; /* host byte order */
	__u64 mac;  /* host-order 48-bit integer */
	__u32 udp_port;
	__u32 reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ATP_WORKER_ADDR_TABLE_SIZE);
	__type(key, struct worker_addr_key);
	__type(value, struct worker_addr_action);
} worker_addr_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct worker_addr_action);
} worker_addr_table_default SEC(".maps");

/* ecn_threshold: queued copies at which an ATP copy leaves marked; 0 turns marking off. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct threshold);
} ecn_threshold SEC(".maps");

/* The phantom queue of one egress port: it drains at rate_kbps (0: none on this port), holds
 * at most limit frames (0: no limit), and holds work until busy_until_ns (bpf_ktime_get_ns
 * time). */
struct phantom_queue {
	struct bpf_spin_lock lock;
	__u32 rate_kbps;
	__u32 limit;
	__u32 reserved;
	__u64 busy_until_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_NUMBERS);
	__type(key, __u32);
	__type(value, struct phantom_queue);
} phantom_queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ATP_EGRESS_EVENTS);
	__type(key, __u32);
	__type(value, struct counter_cell);
} egress_counter SEC(".maps");

/* ---- ATPEgress ---------------------------------------------------------------------------- */

/* A copy of wire_bytes joins port's phantom queue: 1 if an ATP copy leaves marked, i.e. at
 * least ecn_threshold copies of its size are queued ahead of it. Every copy joins (the
 * link carries every frame), unless limit copies of its size are queued already: the port's
 * real queue drops that copy, so it adds no work (an unbounded queue would keep marking
 * for as long as it takes to drain what the real queue never held). Only ATP copies are
 * marked. */
static __always_inline int phantom_queue_join(__u32 port, __u32 wire_bytes, int is_atp)
{
	__u32 zero = 0;
	struct threshold *threshold = bpf_map_lookup_elem(&ecn_threshold, &zero);
	struct phantom_queue *queue = bpf_map_lookup_elem(&phantom_queue, &port);
	__u64 now = bpf_ktime_get_ns();
	__u64 threshold_frames = threshold ? threshold->value : 0;
	int marked = 0;

	if (!queue)
		return 0;
	bpf_spin_lock(&queue->lock);
	if (queue->rate_kbps) {
		__u64 service_ns = (__u64)wire_bytes * 8 * NS_PER_BIT_AT_1_KBPS / queue->rate_kbps;
		__u64 backlog_ns = queue->busy_until_ns > now ? queue->busy_until_ns - now : 0;

		marked = is_atp && threshold_frames && backlog_ns >= threshold_frames * service_ns;
		if (!queue->limit || backlog_ns < queue->limit * service_ns)
			queue->busy_until_ns = now + backlog_ns + service_ns;
	}
	bpf_spin_unlock(&queue->lock);
	return marked;
}

/* ATPEgress's drop simulator, first, for every copy the traffic manager hands to egress
 * (a flood's echo is never made), before egress looks at it: 1 if the copy is dropped
 * (counted; it is not addressed, marked or sent, and joins no phantom queue). Its threshold
 * is read once per frame (drop_threshold(&egress_drop_threshold)), before the copies. */
static __always_inline int egress_dropped(__u32 drop_threshold, __u32 wire_bytes)
{
	if (!drop_draw(drop_threshold))
		return 0;
	count(&egress_counter, ATP_EGV_DROP_SIM_EGRESS, wire_bytes);
	return 1;
}

/* The rest of ATPEgress.apply for a copy the drop simulator kept, whose headers (up to atp_h
 * for an ATP copy) are in hdr: phantom queue and ECN, the IPv4 checksum, the egress
 * counter; the headers are written into the frame. 0 if they could not be. */
static __always_inline int egress_atp(struct __sk_buff *skb, struct headers *hdr, __u32 port)
{
	if (phantom_queue_join(port, ATP_FRAME_BYTES, 1)) {
		hdr->atp.flags |= ATP_FLAG_ECN;
		hdr->ipv4.tos |= IPV4_ECN_CE;
		count(&egress_counter, ATP_EGV_ECN_MARKED, ATP_FRAME_BYTES);
	}
	hdr->ipv4.check = ipv4_checksum(&hdr->ipv4);
	if (bpf_skb_store_bytes(skb, 0, hdr, sizeof(*hdr), 0))
		return 0;
	count(&egress_counter, ATP_EGV_SENT, ATP_FRAME_BYTES);
	return 1;
}

/* The rest of ATPEgress.apply for ordinary traffic the drop simulator kept (its checksum is
 * fixed once, in l2_forward). */
static __always_inline void egress_ordinary(__u32 port, __u32 wire_bytes)
{
	phantom_queue_join(port, wire_bytes, 0);
	count(&egress_counter, ATP_EGV_SENT, wire_bytes);
}

/* ---- traffic manager ---------------------------------------------------------------------- */

/* Counted last (see the top of the file), then the verdict. */
static __always_inline int finish(__u32 event, __u32 wire_bytes, int verdict)
{
	count(&event_counter, event, wire_bytes);
	return verdict;
}

/* An ATP packet to its PS's port, through ATPEgress. */
static __always_inline int to_ps(struct __sk_buff *skb, struct headers *hdr, __u32 ps_port, __u32 event)
{
	if (egress_dropped(drop_threshold(&egress_drop_threshold), ATP_FRAME_BYTES) || !egress_atp(skb, hdr, ps_port))
		return finish(event, ATP_FRAME_BYTES, TC_ACT_SHOT);
	return finish(event, ATP_FRAME_BYTES, to_port(ps_port));
}

/* The copy of a PS result for worker rid of job app_id: from the address the PS sent it to,
 * to the worker's (worker_addr_table; a miss drops the copy, uncounted). */
static __always_inline int address_result(struct headers *copy, const struct headers *result, __u32 app_id, __u32 rid)
{
	struct worker_addr_key key = {.app_id = app_id, .rid = rid};
	struct worker_addr_action *entry = bpf_map_lookup_elem(&worker_addr_table, &key);

	if (!entry) {
		__u32 zero = 0;

		entry = bpf_map_lookup_elem(&worker_addr_table_default, &zero);
	}
	if (!entry || entry->action != WORKER_ADDR_TABLE_SET_WORKER_ADDR)
		return 0;
	__builtin_memcpy(copy, result, sizeof(*copy));
	mac_bytes(copy->ethernet.h_dest, entry->mac);
	__builtin_memcpy(copy->ethernet.h_source, result->ethernet.h_dest, ETH_ALEN);
	copy->ipv4.saddr = result->ipv4.daddr;
	copy->ipv4.daddr = bpf_htonl(entry->ipv4);
	copy->udp.source = result->udp.dest;
	copy->udp.dest = bpf_htons(entry->udp_port);
	copy->udp.check = 0;
	return 1;
}

/* A PS result to every worker of its job: one copy per (rid, port) of the group, each
 * addressed and marked by ATPEgress, then the original is dropped. */
static __always_inline int multicast_result(struct __sk_buff *skb, const struct headers *result, __u32 group_id,
					    __u32 app_id, __u32 event)
{
	struct mc_group *group = bpf_map_lookup_elem(&mc_group, &group_id);
	__u32 egress_threshold = drop_threshold(&egress_drop_threshold);
	struct headers copy;

	if (!group)
		return finish(event, ATP_FRAME_BYTES, TC_ACT_SHOT);
	for (__u32 i = 0; i < MC_MAX_REPLICAS; i++) {
		if (i >= group->num_replicas)
			break;
		struct replica replica = group->replicas[i];

		if (egress_dropped(egress_threshold, ATP_FRAME_BYTES) || !address_result(&copy, result, app_id, replica.rid) ||
		    !egress_atp(skb, &copy, replica.port))
			continue;
		__u32 ifindex = ifindex_of(replica.port);

		if (ifindex)
			bpf_clone_redirect(skb, ifindex, 0);
	}
	return finish(event, ATP_FRAME_BYTES, TC_ACT_SHOT);
}

/* l2_flood: every port of the flood group but the one the frame came in on. */
static __always_inline int flood(struct __sk_buff *skb, __u32 in_port, __u32 wire_bytes)
{
	__u32 group_id = ATP_FLOOD_MCAST_GRP;
	struct mc_group *group = bpf_map_lookup_elem(&mc_group, &group_id);
	__u32 egress_threshold = drop_threshold(&egress_drop_threshold);

	if (!group)
		return finish(ATP_EV_FORWARDED, wire_bytes, TC_ACT_SHOT);
	for (__u32 i = 0; i < MC_MAX_REPLICAS; i++) {
		if (i >= group->num_replicas)
			break;
		__u32 port = group->replicas[i].port;

		if (port == in_port || egress_dropped(egress_threshold, wire_bytes))
			continue;
		egress_ordinary(port, wire_bytes);
		__u32 ifindex = ifindex_of(port);

		if (ifindex)
			bpf_clone_redirect(skb, ifindex, 0);
	}
	return finish(ATP_EV_FORWARDED, wire_bytes, TC_ACT_SHOT);
}

/* ---- ATPIngress step 1: L2 forwarding ------------------------------------------------------ */

/* ATPComputeChecksum for a frame that leaves as it came: an untagged option-less IPv4
 * header, all of it there (``parsed`` bytes of hdr are the frame's). */
static __always_inline void compute_checksum_forwarded(struct __sk_buff *skb, const struct headers *hdr, __u32 parsed)
{
	if (skb->vlan_present || parsed < ETH_HLEN + sizeof(struct iphdr) || hdr->ethernet.h_proto != bpf_htons(ETH_P_IP) ||
	    hdr->ipv4.ihl != 5)
		return;
	__be16 check = ipv4_checksum(&hdr->ipv4);

	if (check != hdr->ipv4.check)
		bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, check), &check, sizeof(check), 0);
}

static __always_inline int l2_forward(struct __sk_buff *skb, const struct headers *hdr, __u32 parsed, __u32 in_port,
				      __u32 wire_bytes)
{
	__u64 dst = mac_key(hdr->ethernet.h_dest);
	__u32 zero = 0;
	struct l2_action *l2 = bpf_map_lookup_elem(&l2_table, &dst);

	if (!l2)
		l2 = bpf_map_lookup_elem(&l2_table_default, &zero);
	compute_checksum_forwarded(skb, hdr, parsed);
	if (l2 && l2->action == L2_TABLE_L2_FORWARD) {
		__u32 port = l2->port;

		if (egress_dropped(drop_threshold(&egress_drop_threshold), wire_bytes))
			return finish(ATP_EV_FORWARDED, wire_bytes, TC_ACT_SHOT);
		egress_ordinary(port, wire_bytes);
		return finish(ATP_EV_FORWARDED, wire_bytes, to_port(port));
	}
	return flood(skb, in_port, wire_bytes);
}

/* ---- ATPIngress steps 5-8: the aggregator, under its lock ------------------------------------ */

enum outcome {
	AGGREGATED = ATP_EV_AGGREGATED,
	FULL_TO_PS = ATP_EV_FULL_TO_PS,
	COLLISION_TO_PS = ATP_EV_COLLISION_TO_PS,
	DUPLICATE_DROPPED = ATP_EV_DUPLICATE_DROPPED,
	DUPLICATE_TO_PS = ATP_EV_DUPLICATE_TO_PS,
	RESEND_FLUSHED = ATP_EV_RESEND_FLUSHED,
	RESEND_PASSED = ATP_EV_RESEND_PASSED,
};

/* A worker's contribution (bit, its job and sequence, the job's fan-in) and what the
 * aggregator writes back into the packet (bitmap, ECN). */
struct contribution {
	__u32 bit;
	__u32 app_id;
	__u32 seq;
	__u32 num_workers;
	__u32 flags;
	__u32 bitmap_out;
	__u32 ecn_out;
};

/* contribute() of docs/dataplane-atp.md, under the lock: add the values if the bit is new
 * (the first contributor writes), OR in the bit and ECN; data leaves holding the sums.
 * Returns whether the bit was new. */
static __always_inline int contribute(struct aggregator *a, struct contribution *c, struct atp_data *data)
{
	__u32 b = a->bitmap;
	int is_new = (b & c->bit) == 0;

	if (is_new && b == 0) {
#pragma unroll
		for (int i = 0; i < ATP_K; i++)
			a->value[i] = bpf_ntohl(data->d[i]);
	} else if (is_new) {
#pragma unroll
		for (int i = 0; i < ATP_K; i++) {
			a->value[i] += bpf_ntohl(data->d[i]); /* wrapping 32-bit add */
			data->d[i] = bpf_htonl(a->value[i]);
		}
	} else {
#pragma unroll
		for (int i = 0; i < ATP_K; i++)
			data->d[i] = bpf_htonl(a->value[i]);
	}
	if (is_new) {
		a->bitmap = b | c->bit;
		a->count += 1;
	}
	a->ecn |= (c->flags & ATP_FLAG_ECN) ? 1 : 0;
	c->bitmap_out = a->bitmap;
	c->ecn_out = a->ecn;
	return is_new;
}

static __always_inline void free_aggregator(struct aggregator *a)
{
	a->owner_app = 0;
	a->owner_seq = 0;
	a->bitmap = 0;
	a->count = 0;
	a->ecn = 0;
}

/* Steps 5-8 for a worker's packet (not OVERFLOW), atomically on its aggregator. */
static __always_inline enum outcome aggregate(struct aggregator *a, struct contribution *c, struct atp_data *data)
{
	enum outcome outcome;
	int is_new;

	bpf_spin_lock(&a->lock);
	/* 5. */
	int owned = a->owner_app == c->app_id && a->owner_seq == c->seq;

	if (c->flags & ATP_FLAG_RESEND) {
		/* 6. A resend never claims: it flushes its own aggregator, or passes. */
		if (owned) {
			contribute(a, c, data);
			free_aggregator(a);
			outcome = RESEND_FLUSHED;
		} else {
			outcome = RESEND_PASSED;
		}
	} else if (!owned && a->owner_seq != 0) {
		/* 7. Taken by another job or sequence. */
		outcome = COLLISION_TO_PS;
	} else {
		/* 7. First claim; 8. aggregate. */
		if (!owned) {
			a->owner_app = c->app_id;
			a->owner_seq = c->seq;
		}
		is_new = contribute(a, c, data);
		if (a->count != c->num_workers)
			outcome = is_new ? AGGREGATED : DUPLICATE_DROPPED;
		else
			outcome = is_new ? FULL_TO_PS : DUPLICATE_TO_PS;
	}
	bpf_spin_unlock(&a->lock);
	return outcome;
}

/* The packet's k values in this core's scratch cell, or NULL. */
static __always_inline struct atp_data *load_values(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct atp_data *data = bpf_map_lookup_elem(&scratch, &zero);

	if (!data || bpf_skb_load_bytes(skb, DATA_OFFSET, data, sizeof(*data)))
		return NULL;
	return data;
}

/* Steps 4-8 for a packet of a known worker of its job. */
static __always_inline int worker_packet(struct __sk_buff *skb, struct headers *hdr, const struct sender_action *worker)
{
	struct atp_h *atp = &hdr->atp;
	__u32 index = bpf_ntohs(atp->agtr);

	atp->fan_in = worker->num_workers; /* the fan-in comes from the table too */
	/* 4. Not summable in the switch: to the PS untouched. */
	if (atp->flags & ATP_FLAG_OVERFLOW)
		return to_ps(skb, hdr, worker->ps_port, ATP_EV_OVERFLOW_TO_PS);

	struct aggregator *a = bpf_map_lookup_elem(&aggregators, &index);
	struct atp_data *data = load_values(skb);

	if (!a || !data)
		return TC_ACT_SHOT;
	struct contribution c = {
		.bit = bpf_ntohl(atp->bitmap),
		.app_id = worker->app_id,
		.seq = bpf_ntohl(atp->seq),
		.num_workers = worker->num_workers,
		.flags = atp->flags,
	};
	enum outcome outcome = aggregate(a, &c, data);

	switch (outcome) {
	case AGGREGATED:
	case DUPLICATE_DROPPED:
		return finish(outcome, ATP_FRAME_BYTES, TC_ACT_SHOT);
	case RESEND_PASSED:
		return to_ps(skb, hdr, worker->ps_port, outcome);
	case COLLISION_TO_PS:
		atp->flags |= ATP_FLAG_COLLISION;
		return to_ps(skb, hdr, worker->ps_port, outcome);
	default: /* RESEND_FLUSHED, FULL_TO_PS, DUPLICATE_TO_PS: the sums go to the PS */
		atp->bitmap = bpf_htonl(c.bitmap_out);
		if (c.ecn_out)
			atp->flags |= ATP_FLAG_ECN;
		if (bpf_skb_store_bytes(skb, DATA_OFFSET, data, sizeof(*data), 0))
			return finish(outcome, ATP_FRAME_BYTES, TC_ACT_SHOT);
		return to_ps(skb, hdr, worker->ps_port, outcome);
	}
}

/* Step R: a PS result frees the aggregator its sequence owns (values stay: the next first
 * writer overwrites them), unless it is a "resend as float" request (OVERFLOW without
 * RESEND), and goes to the job's workers. */
static __always_inline int result(struct __sk_buff *skb, const struct headers *hdr, const struct sender_action *ps)
{
	const struct atp_h *atp = &hdr->atp;
	__u32 index = bpf_ntohs(atp->agtr);
	__u32 app_id = bpf_ntohs(atp->app_id);
	__u32 seq = bpf_ntohl(atp->seq);
	int frees = !((atp->flags & ATP_FLAG_OVERFLOW) && !(atp->flags & ATP_FLAG_RESEND));
	struct aggregator *a = bpf_map_lookup_elem(&aggregators, &index);
	__u32 event = ATP_EV_RESULT_NOT_OWNER;

	if (!a)
		return TC_ACT_SHOT;
	bpf_spin_lock(&a->lock);
	if (frees && a->owner_app == app_id && a->owner_seq == seq) {
		free_aggregator(a);
		event = ATP_EV_RESULT_FREED;
	}
	bpf_spin_unlock(&a->lock);
	return multicast_result(skb, hdr, ps->mcast_grp, app_id, event);
}

/* ---- ATPParser ------------------------------------------------------------------------------ */

enum parsed_as {
	ORDINARY,     /* not to ATP's port range (or tagged, or too short for UDP) */
	ATP,          /* atp_h extracted, exactly k values follow */
	PARSER_ERROR, /* to ATP's port range, but not exactly atp_h + k values */
};

/* The headers into hdr (as far as the frame has them: ``parsed`` bytes), and what the
 * parser made of the frame. A tagged frame's etherType on the wire is 0x8100: ordinary. */
static __always_inline enum parsed_as parse(struct __sk_buff *skb, struct headers *hdr, __u32 *parsed)
{
	__u32 len = skb->len;

	*parsed = 0;
	if (len >= sizeof(*hdr)) {
		if (bpf_skb_load_bytes(skb, 0, hdr, sizeof(*hdr)))
			return ORDINARY;
		*parsed = sizeof(*hdr);
	} else if (len >= ATP_OFFSET) {
		if (bpf_skb_load_bytes(skb, 0, hdr, ATP_OFFSET))
			return ORDINARY;
		*parsed = ATP_OFFSET;
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
	if (skb->vlan_present || hdr->ethernet.h_proto != bpf_htons(ETH_P_IP) || hdr->ipv4.ihl != 5 ||
	    hdr->ipv4.protocol != IPPROTO_UDP || (bpf_ntohs(hdr->udp.dest) & ATP_UDP_PORT_MASK) != ATP_UDP_PORT_BASE)
		return ORDINARY;
	return len == ATP_FRAME_BYTES ? ATP : PARSER_ERROR;
}

/* ---- ATPIngress ------------------------------------------------------------------------------ */

SEC("tc")
int atp_ingress(struct __sk_buff *skb)
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

	/* 0. Drop simulator (ingress): every frame. */
	if (drop_simulator(&ingress_drop_threshold))
		return finish(ATP_EV_DROP_SIM_INGRESS, wire_bytes, TC_ACT_SHOT);
	if (skb->len < ETH_HLEN) /* not even an Ethernet header */
		return finish(ATP_EV_DROP_MALFORMED, wire_bytes, TC_ACT_SHOT);
	enum parsed_as parsed_as = parse(skb, &hdr, &parsed);

	/* 1. Not ATP: L2 forwarding. */
	if (parsed_as == ORDINARY)
		return l2_forward(skb, &hdr, parsed, in_port, wire_bytes);

	/* 2. Malformed: wrong length, an aggregator beyond the pool, or sequence 0 (a claim with
	 * it would leave the aggregator looking free to every other job). */
	struct atp_h *atp = &hdr.atp;

	if (parsed_as == PARSER_ERROR || bpf_ntohs(hdr.udp.len) != ATP_UDP_LENGTH || bpf_ntohs(atp->agtr) >= ATP_POOL_SIZE ||
	    atp->seq == 0)
		return finish(ATP_EV_DROP_MALFORMED, wire_bytes, TC_ACT_SHOT);

	/* 3. sender_table: who sent it comes from (ingress port, source IPv4), never the packet. */
	struct sender_key key = {.ingress_port = in_port, .src_addr = bpf_ntohl(hdr.ipv4.saddr)};
	__u32 zero = 0;
	struct sender_action *sender = bpf_map_lookup_elem(&sender_table, &key);

	if (!sender)
		sender = bpf_map_lookup_elem(&sender_table_default, &zero);
	if (!sender)
		return TC_ACT_SHOT;
	if (sender->action == SENDER_TABLE_SET_PS) {
		if (!(atp->flags & ATP_FLAG_ACK) || bpf_ntohs(atp->app_id) != sender->app_id)
			return finish(ATP_EV_DROP_WRONG_JOB, wire_bytes, TC_ACT_SHOT);
		return result(skb, &hdr, sender);
	}
	if (sender->action != SENDER_TABLE_SET_WORKER)
		return finish(ATP_EV_DROP_UNKNOWN_SENDER, wire_bytes, TC_ACT_SHOT);
	/* A worker's packet names its own job and only its own bit; it cannot be a result. */
	if (bpf_ntohs(atp->app_id) != sender->app_id || sender->worker_id >= ATP_MAX_WORKERS ||
	    bpf_ntohl(atp->bitmap) != 1u << sender->worker_id || (atp->flags & ATP_FLAG_ACK))
		return finish(ATP_EV_DROP_WRONG_JOB, wire_bytes, TC_ACT_SHOT);
	return worker_packet(skb, &hdr, sender);
}

char _license[] SEC("license") = "Dual BSD/GPL";
