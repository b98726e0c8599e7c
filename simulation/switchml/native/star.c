/*
 * star.c -- the simulated clock's event loop for a star, in C: the same events, in the same
 * order, as simulation/link.py, simulation/switchml/worker.py and simulation/network.py on SimPy, with
 * hosts/switchml/native/worker.c's core as every worker and the embedded switch's
 * SwitchMLIngress/SwitchMLEgress aggregation path as the switch.
 *
 * Why it exists: on SimPy every frame costs 7-11 us of wall time in Python (the link, the
 * pipeline's process, the worker core's numpy calls on small batches), so a 100 MiB
 * all-reduce of 32 workers took 90 s (benchmarks/README.md, "Simulation speed"). Here a frame
 * costs well under a microsecond. Nothing is modelled differently: tests/test_native_star.py
 * runs both on the same networks, lossless and lossy, and demands the same frames on every
 * link, the same TATs, statistics and sums, bit for bit.
 *
 * How the order is kept. SimPy runs events by (time, priority, creation order). This loop
 * keeps one heap with the same key and creates an event wherever the Python code makes SimPy
 * schedule one:
 *   - ARRIVALS: simulation/link.py's Arrivals, one event per distinct arrival instant ``at``,
 *     due at ``now + (at - now)`` (SimPy's Timeout arithmetic), delivering its frames in the
 *     order they were sent;
 *   - ARRIVAL, WAKE: a waiting worker's ``arrival`` event (succeeded by a delivery) and the
 *     timeout beside it in ``arrival | timeout``; whichever is processed first triggers
 *   - CONDITION: the AnyOf condition, whose processing resumes the worker;
 *   - HOLD: a hold's ``env.timeout(wake_at - now)``; INIT: the process's Initialize (SimPy's URGENT priority);
 *   - END, ALL_DONE: the finished process and ``env.all_of`` over them, whose processing
 *     stops the run (events due at the same instant after it wait for the next run).
 * Events that SimPy processes without effect (the losing half of a condition) are not
 * created: they would only take a place in an order nothing else depends on.
 *
 * State: what persists between runs in Python (the links' queues and random generators, the
 * switch's registers and counters, the workers' pools and round-trip estimates) is handed in
 * by pointer and written in place. What only this loop holds (frames in flight, frames
 * waiting in a worker's receive queue, pending events, the clock) lives in struct sim,
 * created once per network, so that a frame still in flight when a job ends reaches its
 * host during the next, as on SimPy.
 */
#include "worker.c"

#define ADDRESS_BYTES 42 /* Ethernet + IPv4 + UDP: SwitchMLDeparser's per-rank rewrite */
#define MT_N 624

enum { PRIO_URGENT = 0, PRIO_NORMAL = 1 };
enum { E_ARRIVALS, E_INIT, E_ARRIVAL, E_WAKE, E_CONDITION, E_HOLD, E_END, E_ALL_DONE };
enum { TO_SWITCH = 0, TO_WORKER = 1, TO_NOBODY = 2 };
enum { W_IDLE, W_STARTING, W_RUNNING, W_WAITING, W_HOLDING, W_DONE };
/* What sim_run returns. */
enum { SIM_DONE = 0, SIM_NO_MEMORY = 1, SIM_OFF_PATH = 2 };

/* ---- what Python hands in (mirrored in simulation/switchml/native/star.py) ---------------------- */

/* One direction of a link: simulation/link.py's Link, with its random.Random's state. */
struct sim_link {
    double seconds_per_byte, delay_s, burst, tokens, free_at, loss;
    int32_t queue_packets, to_kind, to_index, dep_head, dep_count, mt_index;
    double *departures; /* ring of queue_packets */
    uint32_t *mt;       /* MT_N words: random.Random.getstate() */
    int64_t frames, bytes, queue_drops, lost;
    /* Optional (NULL: off), for the differential test: every frame handed to the link, its
     * time and what became of it (TRACE_*), up to trace_capacity frames of frame_bytes. */
    double *trace_time;
    uint8_t *trace_frames;
    int8_t *trace_outcome;
    int64_t trace_len, trace_capacity;
};

enum { TRACE_SENT = 0, TRACE_QUEUE_DROP = 1, TRACE_LOST = 2 };

static void trace(struct sim_link *link, double now, const uint8_t *frame, int32_t length, int32_t frame_bytes, int outcome)
{
    if (!link->trace_time || link->trace_len >= link->trace_capacity)
        return;
    int64_t i = link->trace_len++;
    link->trace_time[i] = now;
    memcpy(link->trace_frames + i * frame_bytes, frame, (size_t)length);
    link->trace_outcome[i] = (int8_t)outcome;
}

/* The switch: the embedded pipeline's registers and counters (in place), the worker table's
 * entry of each port, the job's multicast group and the egress's result headers. */
struct sim_switch {
    int32_t k, max_pool_size, frame_bytes, n_ports;
    int32_t *values;                 /* ValueRegisters.matrix: (2 * max_pool_size) x k, native int32 */
    uint32_t *bitmap, *count, *seq;  /* CellRegister cells */
    int32_t *exponent;               /* ExponentRegister cells (signed int8 values) */
    int64_t *event_packets, *event_bytes, *egress_packets, *egress_bytes;
    /* per port 1..n_ports (index 0 unused) */
    int32_t *out_link;               /* the link the port transmits on, -1: none */
    int32_t *set_worker;             /* 1: worker_table has set_worker for the port's host, 0: its default (drop) */
    int32_t *rank, *job_id, *num_workers, *mcast_grp, *slot_base, *pool_size;
    const uint8_t *in_headers;       /* ADDRESS_BYTES per port: the only headers its host sends */
    /* the job's multicast group */
    int32_t n_replicas;
    const int32_t *replica_rid, *replica_port;
    /* SwitchMLEgress.result_headers(in_headers[port], job_id, rid): (n_ports + 1) x max_rank x ADDRESS_BYTES */
    int32_t max_rank;
    const uint8_t *result_headers;
    const uint8_t *result_ok;        /* (n_ports + 1) x max_rank: 0 where rank_addr_table misses */
};

/* ---- the loop's own state ------------------------------------------------------------- */

struct event {
    double time;
    int64_t order;
    int32_t prio, kind, who;
    int64_t token;
};

struct entry { int32_t link, frame, next; };
struct bucket { double at; int32_t head, tail, chain; };

struct worker_state {
    int32_t phase, armed, triggered, status, uplink;
    int64_t token;
    double end;
    struct sml_job *job;
    const uint8_t *header;
    int32_t *inbox; /* ring of frame ids */
    int64_t inbox_head, inbox_count, inbox_capacity;
};

struct sim {
    double now;
    int64_t order;
    struct event *heap;
    int64_t heap_len, heap_cap;
    uint8_t *frames;          /* frame_bytes each */
    int32_t *frame_len, *free_frames;
    int32_t n_frames, n_free, frame_bytes, frames_capacity;
    struct entry *entries;
    int32_t n_entries, entries_cap, free_entry;
    struct bucket *buckets;
    int32_t n_buckets, buckets_cap, free_bucket;
    int32_t *chains;          /* hash of at -> bucket list */
    int32_t chain_mask;
    int32_t n_workers, running, finished, stop;
    struct worker_state *workers;
};

/* ---- random.Random: MT19937 and random() ---------------------------------------------- */

static uint32_t mt_next(struct sim_link *link)
{
    uint32_t *mt = link->mt, y;
    if (link->mt_index >= MT_N) {
        int i;
        for (i = 0; i < MT_N; i++) {
            y = (mt[i] & 0x80000000u) | (mt[(i + 1) % MT_N] & 0x7fffffffu);
            mt[i] = mt[(i + 397) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        link->mt_index = 0;
    }
    y = mt[link->mt_index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static double random_random(struct sim_link *link)
{
    uint32_t a = mt_next(link) >> 5, b = mt_next(link) >> 6;
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

/* ---- the event heap: SimPy's (time, priority, creation order) -------------------------- */

static int before(const struct event *a, const struct event *b)
{
    if (a->time != b->time)
        return a->time < b->time;
    if (a->prio != b->prio)
        return a->prio < b->prio;
    return a->order < b->order;
}

static int schedule(struct sim *sim, double time, int32_t prio, int32_t kind, int32_t who, int64_t token)
{
    if (sim->heap_len == sim->heap_cap) {
        int64_t cap = sim->heap_cap ? 2 * sim->heap_cap : 1024;
        struct event *grown = realloc(sim->heap, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        sim->heap = grown;
        sim->heap_cap = cap;
    }
    struct event e = {.time = time, .order = sim->order++, .prio = prio, .kind = kind, .who = who, .token = token};
    int64_t i = sim->heap_len++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!before(&e, &sim->heap[parent]))
            break;
        sim->heap[i] = sim->heap[parent];
        i = parent;
    }
    sim->heap[i] = e;
    return 0;
}

static struct event pop_event(struct sim *sim)
{
    struct event top = sim->heap[0], last = sim->heap[--sim->heap_len];
    int64_t i = 0, n = sim->heap_len;
    for (;;) {
        int64_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && before(&sim->heap[child + 1], &sim->heap[child]))
            child++;
        if (!before(&sim->heap[child], &last))
            break;
        sim->heap[i] = sim->heap[child];
        i = child;
    }
    if (n)
        sim->heap[i] = last;
    return top;
}

/* ---- frames ------------------------------------------------------------------------------ */

/* Room for ``count`` more frames without moving the pool (a frame being processed stays put). */
static int reserve_frames(struct sim *sim, int32_t count)
{
    if (sim->n_free + (sim->frames_capacity - sim->n_frames) >= count)
        return 0;
    int32_t cap = sim->frames_capacity ? 2 * sim->frames_capacity : 4096;
    while (sim->n_free + (cap - sim->n_frames) < count)
        cap *= 2;
    uint8_t *frames = realloc(sim->frames, (size_t)cap * (size_t)sim->frame_bytes);
    if (!frames)
        return -1;
    sim->frames = frames;
    int32_t *lengths = realloc(sim->frame_len, (size_t)cap * sizeof *lengths);
    if (!lengths)
        return -1;
    sim->frame_len = lengths;
    int32_t *free_frames = realloc(sim->free_frames, (size_t)cap * sizeof *free_frames);
    if (!free_frames)
        return -1;
    sim->free_frames = free_frames;
    sim->frames_capacity = cap;
    return 0;
}

static int32_t new_frame(struct sim *sim)
{
    if (reserve_frames(sim, 1))
        return -1;
    if (sim->n_free)
        return sim->free_frames[--sim->n_free];
    return sim->n_frames++;
}

static void free_frame(struct sim *sim, int32_t frame) { sim->free_frames[sim->n_free++] = frame; }
static uint8_t *frame_at(struct sim *sim, int32_t frame) { return sim->frames + (size_t)frame * (size_t)sim->frame_bytes; }

/* ---- Arrivals: one event per distinct arrival instant ------------------------------------ */

static uint32_t at_hash(double at)
{
    uint64_t bits;
    memcpy(&bits, &at, sizeof bits);
    bits ^= bits >> 29;
    bits *= 0xbf58476d1ce4e5b9ull;
    return (uint32_t)(bits >> 32);
}

/* ``items`` (``used`` of ``*capacity`` elements of ``size`` bytes) with room for one more:
 * itself, or reallocated to twice the capacity (``first`` at first); NULL: no memory. */
static void *with_room(void *items, int32_t used, int32_t *capacity, size_t size, int32_t first)
{
    if (used < *capacity)
        return items;
    int32_t grown_capacity = *capacity ? 2 * *capacity : first;
    void *grown = realloc(items, (size_t)grown_capacity * size);
    if (grown)
        *capacity = grown_capacity;
    return grown;
}

static int arrivals_add(struct sim *sim, double at, int32_t link, int32_t frame)
{
    int32_t *chain = &sim->chains[at_hash(at) & (uint32_t)sim->chain_mask];
    int32_t b = *chain;
    while (b >= 0 && sim->buckets[b].at != at)
        b = sim->buckets[b].chain;
    if (b < 0) {
        if (sim->free_bucket >= 0) {
            b = sim->free_bucket;
            sim->free_bucket = sim->buckets[b].chain;
        } else {
            struct bucket *buckets = with_room(sim->buckets, sim->n_buckets, &sim->buckets_cap, sizeof *buckets, 1024);
            if (!buckets)
                return -1;
            sim->buckets = buckets;
            b = sim->n_buckets++;
        }
        sim->buckets[b] = (struct bucket){.at = at, .head = -1, .tail = -1, .chain = *chain};
        *chain = b;
        if (schedule(sim, sim->now + (at - sim->now), PRIO_NORMAL, E_ARRIVALS, b, 0))
            return -1;
    }
    int32_t e;
    if (sim->free_entry >= 0) {
        e = sim->free_entry;
        sim->free_entry = sim->entries[e].next;
    } else {
        struct entry *entries = with_room(sim->entries, sim->n_entries, &sim->entries_cap, sizeof *entries, 4096);
        if (!entries)
            return -1;
        sim->entries = entries;
        e = sim->n_entries++;
    }
    sim->entries[e] = (struct entry){.link = link, .frame = frame, .next = -1};
    struct bucket *bucket = &sim->buckets[b];
    if (bucket->tail < 0)
        bucket->head = e;
    else
        sim->entries[bucket->tail].next = e;
    bucket->tail = e;
    return 0;
}

/* Arrivals._due.pop(at): unlink the bucket from its chain; its entries are walked by the caller. */
static void arrivals_pop(struct sim *sim, int32_t b)
{
    int32_t *link = &sim->chains[at_hash(sim->buckets[b].at) & (uint32_t)sim->chain_mask];
    while (*link != b)
        link = &sim->buckets[*link].chain;
    *link = sim->buckets[b].chain;
}

/* ---- Link.send ------------------------------------------------------------------------------ */

static int link_send(struct sim *sim, struct sim_link *links, int32_t l, int32_t frame)
{
    struct sim_link *link = &links[l];
    double now = sim->now;
    while (link->dep_count && link->departures[link->dep_head] <= now) {
        link->dep_head = (link->dep_head + 1) % link->queue_packets;
        link->dep_count--;
    }
    if (link->dep_count >= link->queue_packets) {
        trace(link, now, frame_at(sim, frame), sim->frame_len[frame], sim->frame_bytes, TRACE_QUEUE_DROP);
        link->queue_drops++;
        free_frame(sim, frame);
        return 0;
    }
    double length = (double)sim->frame_len[frame];
    double start = now >= link->free_at ? now : link->free_at; /* max(now, free_at) */
    double finish;
    if (link->burst != 0.0) {
        double tokens = link->tokens + (start - link->free_at) / link->seconds_per_byte;
        if (!(tokens < link->burst))
            tokens = link->burst;
        /* htb's rule (simulation/link.py): the frame leaves once the bucket is out of debt, charged as it leaves */
        finish = start + (tokens < 0.0 ? -tokens : 0.0) * link->seconds_per_byte;
        link->tokens = (tokens > 0.0 ? tokens : 0.0) - length;
    } else {
        finish = start + length * link->seconds_per_byte;
    }
    link->free_at = finish;
    link->departures[(link->dep_head + link->dep_count) % link->queue_packets] = finish;
    link->dep_count++;
    link->frames++;
    link->bytes += sim->frame_len[frame];
    if (link->loss != 0.0 && random_random(link) < link->loss) {
        trace(link, now, frame_at(sim, frame), sim->frame_len[frame], sim->frame_bytes, TRACE_LOST);
        link->lost++;
        free_frame(sim, frame);
        return 0;
    }
    trace(link, now, frame_at(sim, frame), sim->frame_len[frame], sim->frame_bytes, TRACE_SENT);
    return arrivals_add(sim, finish + link->delay_s, l, frame);
}

/* ---- the switch: SwitchMLPipeline.process for what a star's workers send ------------------- */

/* A big-endian element at any alignment, as one load and a byte swap (which the compiler
 * can vectorize, unlike four byte loads). */
static inline uint32_t load_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return __builtin_bswap32(v);
}

static void count_event(int64_t *packets, int64_t *bytes, int index, int64_t length)
{
    packets[index]++;
    bytes[index] += length;
}

/* _emit_result + _emit: the result in ``work`` with the rank's headers, out of ``port``. */
static int emit_result(struct sim *sim, struct sim_link *links, const struct sim_switch *sw, uint8_t *work, int32_t in_port, int32_t rank,
                       int32_t port)
{
    if (rank < 0 || rank >= sw->max_rank || !sw->result_ok[in_port * sw->max_rank + rank])
        return 0; /* rank_addr_table miss -> drop */
    memcpy(work, sw->result_headers + ((size_t)in_port * (size_t)sw->max_rank + (size_t)rank) * ADDRESS_BYTES, ADDRESS_BYTES);
    count_event(sw->egress_packets, sw->egress_bytes, EGV_SENT, sw->frame_bytes); /* egress.admit: no drop simulator */
    if (port < 1 || port > sw->n_ports || sw->out_link[port] < 0)
        return 0;
    int32_t frame = new_frame(sim);
    if (frame < 0)
        return -1;
    memcpy(frame_at(sim, frame), work, (size_t)sw->frame_bytes);
    sim->frame_len[frame] = sw->frame_bytes;
    return link_send(sim, links, sw->out_link[port], frame);
}

/* SwitchMLIngress._write_result: data := the cell's values, msg_type := RESULT, exponent := max. */
static void write_result(uint8_t *work, const int32_t *row, int32_t k, int32_t exponent)
{
    uint8_t *data = work + ADDRESS_BYTES + SWITCHML_HEADER_BYTES;
    for (int32_t e = 0; e < k; e++) {
        uint32_t big = __builtin_bswap32((uint32_t)row[e]);
        memcpy(data + 4 * e, &big, sizeof big);
    }
    work[ADDRESS_BYTES + F_MSG_TYPE] = SWITCHML_MSG_RESULT;
    work[ADDRESS_BYTES + F_EXPONENT] = (uint8_t)(exponent & 0xFF);
}

static int switch_process(struct sim *sim, struct sim_link *links, const struct sim_switch *sw, int32_t port, uint8_t *work, int32_t length);

/* Steps 3-6 of SwitchMLIngress.apply for a frame from a worker, then the traffic manager and
 * egress. Returns 0, -1 (no memory) or 1 (a frame this path does not take). */
static int switch_receive(struct sim *sim, struct sim_link *links, const struct sim_switch *sw, int32_t port, int32_t frame)
{
    int32_t length = sim->frame_len[frame];
    const uint8_t *in = frame_at(sim, frame);
    if (port < 1 || port > sw->n_ports || length != sw->frame_bytes
        || memcmp(in, sw->in_headers + (size_t)port * ADDRESS_BYTES, ADDRESS_BYTES) != 0)
        return 1;
    if (reserve_frames(sim, sw->n_replicas))
        return -1;
    uint8_t *work = frame_at(sim, frame); /* the pipeline's packet buffer: the frame itself, which copies do not move */
    int status = switch_process(sim, links, sw, port, work, length);
    free_frame(sim, frame);
    return status;
}

static int switch_process(struct sim *sim, struct sim_link *links, const struct sim_switch *sw, int32_t port, uint8_t *work, int32_t length)
{
    const uint8_t *h = work + ADDRESS_BYTES;
    uint32_t msg_type = h[F_MSG_TYPE], shadow_set = h[F_SHADOW_SET], slot = get_be16(h + F_SLOT);
    /* 3. Malformed (a result from a worker port has no uplink: _from_above drops it as malformed). */
    if (get_be16(h + F_NUM_ELEMENTS) != (uint32_t)sw->k || msg_type != SWITCHML_MSG_UPDATE || shadow_set > 1
        || slot >= (uint32_t)sw->max_pool_size) {
        count_event(sw->event_packets, sw->event_bytes, EV_DROP_MALFORMED, length);
        return 0;
    }
    /* 4. worker_table */
    if (!sw->set_worker[port]) {
        count_event(sw->event_packets, sw->event_bytes, EV_DROP_UNKNOWN_SENDER, length);
        return 0;
    }
    uint32_t job_id = get_be16(h + F_JOB_ID);
    int32_t rank = sw->rank[port], num_workers = sw->num_workers[port], slot_base = sw->slot_base[port];
    /* 5. wrong job; 5b. outside the pool */
    if (job_id != (uint32_t)sw->job_id[port]) {
        count_event(sw->event_packets, sw->event_bytes, EV_DROP_WRONG_JOB, length);
        return 0;
    }
    if (slot >= (uint32_t)sw->pool_size[port] || slot_base + (int32_t)slot >= sw->max_pool_size) {
        count_event(sw->event_packets, sw->event_bytes, EV_DROP_OUTSIDE_POOL, length);
        return 0;
    }
    /* 6. aggregation (a star: no uplink) */
    uint32_t rank_bit = (uint32_t)1 << rank;
    int32_t cell = slot_base + (int32_t)slot;
    int32_t idx = (int32_t)shadow_set * sw->max_pool_size + cell, other = (1 - (int32_t)shadow_set) * sw->max_pool_size + cell;
    uint32_t b = sw->bitmap[idx], seq = get_be32(h + F_SEQ);
    int32_t exponent = (int8_t)h[F_EXPONENT];
    int is_new = !(b & rank_bit), stale;
    if (is_new && b == 0) {
        uint32_t ahead = seq - sw->seq[idx];
        stale = sw->count[idx] != 0 && !(0 < ahead && ahead < 0x80000000u);
    } else if (is_new) {
        stale = seq != sw->seq[idx] || sw->count[idx] >= (uint32_t)num_workers;
    } else {
        stale = seq != sw->seq[idx];
    }
    if (stale) {
        count_event(sw->event_packets, sw->event_bytes, EV_DROP_STALE, length);
        return 0;
    }
    int32_t *row = sw->values + (size_t)idx * (size_t)sw->k;
    const uint8_t *data = h + SWITCHML_HEADER_BYTES;
    if (is_new) {
        sw->bitmap[idx] = b | rank_bit;
        sw->bitmap[other] &= ~rank_bit;
        if (b == 0) {
            for (int32_t e = 0; e < sw->k; e++)
                row[e] = (int32_t)load_be32(data + 4 * e);
            sw->exponent[idx] = exponent;
            sw->count[idx] = 1;
            sw->seq[idx] = seq;
        } else {
            for (int32_t e = 0; e < sw->k; e++) /* int32 wraps like bit<32> */
                row[e] = (int32_t)((uint32_t)row[e] + load_be32(data + 4 * e));
            if (exponent > sw->exponent[idx])
                sw->exponent[idx] = exponent;
            sw->count[idx]++;
        }
        if (sw->count[idx] == (uint32_t)num_workers) {
            write_result(work, row, sw->k, sw->exponent[idx]);
            count_event(sw->event_packets, sw->event_bytes, EV_RESULT_MULTICAST, length);
            if (sw->mcast_grp[port] < 0)
                return 0; /* an unknown group replicates to nothing */
            for (int32_t r = 0; r < sw->n_replicas; r++)
                if (emit_result(sim, links, sw, work, port, sw->replica_rid[r], sw->replica_port[r]))
                    return -1;
            return 0;
        }
        count_event(sw->event_packets, sw->event_bytes, EV_UPDATE_CONSUMED, length);
        return 0;
    }
    if (sw->count[idx] == (uint32_t)num_workers) { /* the worker lost the result */
        write_result(work, row, sw->k, sw->exponent[idx]);
        count_event(sw->event_packets, sw->event_bytes, EV_RESULT_UNICAST, length);
        return emit_result(sim, links, sw, work, port, rank, port);
    }
    count_event(sw->event_packets, sw->event_bytes, EV_RETX_IGNORED, length);
    return 0;
}

/* ---- the workers: simulation/switchml/worker.py's SimulatedWorker -------------------------------- */

static int worker_send(struct sim *sim, struct sim_link *links, struct worker_state *w, int64_t count)
{
    struct sml_job *job = w->job;
    for (int64_t i = 0; i < count; i++) {
        int32_t frame = new_frame(sim);
        if (frame < 0)
            return -1;
        uint8_t *out = frame_at(sim, frame);
        memcpy(out, w->header, ADDRESS_BYTES);
        memcpy(out + ADDRESS_BYTES, job->tx + i * job->record_bytes, (size_t)job->record_bytes);
        sim->frame_len[frame] = ADDRESS_BYTES + job->record_bytes;
        if (link_send(sim, links, w->uplink, frame))
            return -1;
    }
    return 0;
}

/* SimulatedWorker.deliver */
static int worker_deliver(struct sim *sim, struct worker_state *w, int32_t worker, int32_t frame)
{
    if (w->inbox_count == w->inbox_capacity) {
        int64_t cap = w->inbox_capacity ? 2 * w->inbox_capacity : 1024;
        int32_t *grown = malloc((size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        for (int64_t i = 0; i < w->inbox_count; i++)
            grown[i] = w->inbox[(w->inbox_head + i) % w->inbox_capacity];
        free(w->inbox);
        w->inbox = grown;
        w->inbox_head = 0;
        w->inbox_capacity = cap;
    }
    w->inbox[(w->inbox_head + w->inbox_count) % w->inbox_capacity] = frame;
    w->inbox_count++;
    if (w->armed && !w->triggered) { /* arrival.succeed() */
        w->triggered = 1;
        return schedule(sim, sim->now, PRIO_NORMAL, E_ARRIVAL, worker, w->token);
    }
    return 0;
}

/* SimulatedWorker._take: up to one batch of arrived results into rx, with their payload lengths. */
static int64_t worker_take(struct sim *sim, struct worker_state *w)
{
    struct sml_job *job = w->job;
    int64_t count = w->inbox_count < job->capacity ? w->inbox_count : job->capacity;
    for (int64_t i = 0; i < count; i++) {
        int32_t frame = w->inbox[w->inbox_head];
        w->inbox_head = (w->inbox_head + 1) % w->inbox_capacity;
        w->inbox_count--;
        int32_t payload = sim->frame_len[frame] - ADDRESS_BYTES;
        uint8_t *row = job->rx + i * job->rx_stride;
        int32_t copied = payload < job->rx_stride ? payload : job->rx_stride;
        memcpy(row, frame_at(sim, frame) + ADDRESS_BYTES, (size_t)copied);
        if (copied < job->rx_stride) /* a runt: the core only looks at its length */
            memset(row + copied, 0, (size_t)(job->rx_stride - copied));
        job->rx_lengths[i] = (uint32_t)payload;
        free_frame(sim, frame);
    }
    return count;
}

static int worker_finish(struct sim *sim, struct worker_state *w, int32_t worker, int status)
{
    w->status = status;
    w->end = sim->now;
    w->phase = W_DONE;
    return schedule(sim, sim->now, PRIO_NORMAL, E_END, worker, 0);
}

/* SimulatedWorker._run from where the worker last yielded, until it yields again or ends:
 * the core's steps, with the links and this loop's events. */
static int worker_resume(struct sim *sim, struct sim_link *links, int32_t worker)
{
    struct worker_state *w = &sim->workers[worker];
    struct sml_job *job = w->job;
    double now = sim->now;
    struct sml_step st;
    if (w->phase == W_STARTING) {
        if (!job->n_chunks) /* an empty tensor: nothing to send */
            return worker_finish(sim, w, worker, SML_DONE);
        st = start(job, now);
    } else {
        st = step(job, now, worker_take(sim, w));
    }
    w->phase = W_RUNNING;
    for (;;) {
        if (st.status == SML_FAILED || worker_send(sim, links, w, st.send))
            return -1;
        if (st.status != SML_RUNNING)
            return worker_finish(sim, w, worker, st.status);
        double wait = st.wake_at - now;
        if (wait > 0.0 && st.on_arrival && !w->inbox_count) { /* arrival | timeout */
            w->token++;
            w->armed = 1;
            w->triggered = 0;
            w->phase = W_WAITING;
            return schedule(sim, now + wait, PRIO_NORMAL, E_WAKE, worker, w->token);
        }
        if (wait > 0.0 && !st.on_arrival) { /* a hold */
            w->phase = W_HOLDING;
            return schedule(sim, now + wait, PRIO_NORMAL, E_HOLD, worker, ++w->token);
        }
        st = step(job, now, worker_take(sim, w));
    }
}

/* ---- the API ------------------------------------------------------------------------------- */

struct sim *sim_create(int32_t n_workers, int32_t frame_bytes)
{
    struct sim *sim = calloc(1, sizeof *sim);
    if (!sim)
        return NULL;
    sim->frame_bytes = frame_bytes;
    sim->n_workers = n_workers;
    sim->free_entry = sim->free_bucket = -1;
    sim->chain_mask = (1 << 14) - 1;
    sim->chains = malloc((size_t)(sim->chain_mask + 1) * sizeof *sim->chains);
    sim->workers = calloc((size_t)n_workers, sizeof *sim->workers);
    if (!sim->chains || !sim->workers) {
        free(sim->chains);
        free(sim->workers);
        free(sim);
        return NULL;
    }
    for (int32_t i = 0; i <= sim->chain_mask; i++)
        sim->chains[i] = -1;
    return sim;
}

void sim_destroy(struct sim *sim)
{
    if (!sim)
        return;
    for (int32_t i = 0; i < sim->n_workers; i++)
        free(sim->workers[i].inbox);
    free(sim->workers);
    free(sim->heap);
    free(sim->frames);
    free(sim->frame_len);
    free(sim->free_frames);
    free(sim->entries);
    free(sim->buckets);
    free(sim->chains);
    free(sim);
}

double sim_now(const struct sim *sim) { return sim->now; }
int32_t sim_address_bytes(void) { return ADDRESS_BYTES; }
int64_t sim_link_size(void) { return (int64_t)sizeof(struct sim_link); }
int64_t sim_switch_size(void) { return (int64_t)sizeof(struct sim_switch); }

/* The workers' status and end time after sim_run (SML_DONE or SML_TIMED_OUT). */
int32_t sim_worker_status(const struct sim *sim, int32_t worker) { return sim->workers[worker].status; }
double sim_worker_end(const struct sim *sim, int32_t worker) { return sim->workers[worker].end; }

static int deliver_bucket(struct sim *sim, struct sim_link *links, const struct sim_switch *sw, int32_t b)
{
    arrivals_pop(sim, b);
    int32_t e = sim->buckets[b].head;
    sim->buckets[b].chain = sim->free_bucket;
    sim->free_bucket = b;
    while (e >= 0) {
        struct entry entry = sim->entries[e];
        sim->entries[e].next = sim->free_entry;
        sim->free_entry = e;
        const struct sim_link *link = &links[entry.link];
        int status = 0;
        if (link->to_kind == TO_SWITCH)
            status = switch_receive(sim, links, sw, link->to_index, entry.frame);
        else if (link->to_kind == TO_WORKER)
            status = worker_deliver(sim, &sim->workers[link->to_index], link->to_index, entry.frame);
        else
            free_frame(sim, entry.frame);
        if (status)
            return status;
        e = entry.next;
    }
    return 0;
}

/* One all-reduce of every worker, released at the simulated now (SimulatedNetwork.allreduce):
 * jobs[i] is worker i's job (filled as for sml_run, t0 the simulated now, fd unused),
 * uplinks[i] its link to the switch, headers its ADDRESS_BYTES of headers. Runs until
 * every worker has ended (SIM_DONE); SIM_NO_MEMORY, or SIM_OFF_PATH for a frame the switch's
 * path here does not take (the network must then run on SimPy). */
int sim_run(struct sim *sim, struct sim_link *links, const struct sim_switch *sw, struct sml_job **jobs, const int32_t *uplinks,
            const uint8_t *headers)
{
    for (int32_t i = 0; i < sim->n_workers; i++) {
        struct worker_state *w = &sim->workers[i];
        w->job = jobs[i];
        w->uplink = uplinks[i];
        w->header = headers + (size_t)i * ADDRESS_BYTES;
        w->armed = 0;
        w->phase = W_STARTING;
        w->status = -1;
        if (schedule(sim, sim->now, PRIO_URGENT, E_INIT, i, 0))
            return SIM_NO_MEMORY;
    }
    sim->finished = 0;
    while (sim->heap_len) {
        struct event e = pop_event(sim);
        sim->now = e.time;
        struct worker_state *w = e.kind == E_ARRIVALS || e.kind == E_ALL_DONE ? NULL : &sim->workers[e.who];
        int status = 0;
        switch (e.kind) {
        case E_ARRIVALS:
            status = deliver_bucket(sim, links, sw, e.who);
            break;
        case E_INIT:
            status = worker_resume(sim, links, e.who);
            break;
        case E_ARRIVAL:
        case E_WAKE: /* either half of arrival | timeout: the first triggers the condition */
            if (w->phase == W_WAITING && e.token == w->token && w->armed == 1) {
                w->armed = 2;
                status = schedule(sim, sim->now, PRIO_NORMAL, E_CONDITION, e.who, e.token);
            }
            break;
        case E_CONDITION:
            w->armed = 0;
            status = worker_resume(sim, links, e.who);
            break;
        case E_HOLD:
            status = worker_resume(sim, links, e.who);
            break;
        case E_END:
            if (++sim->finished == sim->n_workers)
                status = schedule(sim, sim->now, PRIO_NORMAL, E_ALL_DONE, 0, 0);
            break;
        case E_ALL_DONE:
            return SIM_DONE;
        }
        if (status < 0)
            return SIM_NO_MEMORY;
        if (status > 0)
            return SIM_OFF_PATH;
    }
    return SIM_DONE;
}
