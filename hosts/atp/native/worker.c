/*
 * worker.c -- the ATP worker's data path in C: hosts/atp/worker.py's WorkerCore (with the
 * AggregatorMap's index and adopt of hosts/atp/aggregators.py) and the loop of
 * hosts/atp/client.py's ATPClient._run, function for function, with the same names.
 *
 * Why it exists: the Python worker spends 80-90 us of CPU per packet, so eight of them on two
 * cores set the emulator's pace instead of the links (benchmarks/README.md, "Emulation
 * capacity"). The Python core stays the reference; tests/test_native_atp.py drives both on the
 * same datagrams, adversarial ones among them, and demands the same packets, byte for byte,
 * and the same state and counts.
 *
 * Python (hosts/atp/native/job.py) builds the Python WorkerCore of the all-reduce, which
 * chunks the values and allocates its arrays, and hands those very arrays to this file in
 * struct atp_job: the C core works on the Python core's state, so once atp_run returns the
 * Python core is finished (its result, window and counts are the ones job.py reads). The
 * aggregator map's indices and used set are arrays here and go back into the map after the
 * job (a collision re-points positions for later all-reduces).
 *
 * Nothing a datagram says is trusted: a datagram of the wrong size is counted (malformed) by
 * the loop, one that is not a result of this all-reduce is counted (ignored) by receive, and
 * every index derived from a header is range-checked before it is used, as in Python.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "constants.p4"
#include "worker.h" /* hosts/native: FIELD, field_offset, timeline_add */
#include "mmsg.h" /* hosts/native: clock_now, span, byte order, send_batch, receive_batch, message_table */

/* Offsets of atp_h's fields in a payload (protocol.atp.packet.FIELD_OFFSETS). */
enum { F_BITMAP = 0, F_FAN_IN = 4, F_FLAGS = 5, F_APP_ID = 6, F_SEQ = 8, F_AGTR = 12, F_NEW_AGTR = 14 };

#define HOLD_SHARE 0.5          /* worker.HOLD_SHARE */
#define HOLD_BELOW_SHARE 0.9    /* worker.HOLD_BELOW_SHARE */
#define HOLD_MAX_S 0.010        /* worker.HOLD_MAX_S */

/* What atp_run returns, and expire's answer when the worker stalled. */
enum { ATP_DONE = 0, ATP_TIMED_OUT = 1, ATP_INTERRUPTED = 2, ATP_FAILED = 3, ATP_STALLED = 4 };
/* Which call failed (atp_job.failed_call) when ATP_FAILED. */
enum { CALL_NONE = 0, CALL_SENDMMSG = 1, CALL_RECVMMSG = 2, CALL_POLL = 3, CALL_MALLOC = 4 };

/* WorkerStats, with the loop's own counts (client.py's malformed and received bytes). */
struct atp_stats {
    int64_t packets_sent, resends_gap, resends_timeout, results, duplicates, ignored, collisions_adopted, ecn_results,
        window_halvings, cwnd_count, malformed, received_bytes;
};

struct atp_job {
    /* -- WorkerConfig and the all-reduce's arrays: Python fills them (the Python core's own) -- */
    int32_t app_id, worker_id, n_workers, k, congestion_control, positions, pool_size, payload_bytes;
    int64_t n_packets;
    uint32_t seq_base;
    double resend_timeout_s, stall_s, first_resend_timeout_s, scale;
    double frame_s;                 /* a frame's time on the slowest link (WorkerConfig.frame_s); 0: unshaped, never hold */
    const void *chunks;             /* n_packets x k, native byte order (WorkerCore._chunks): float32 with a scale, else int32 */
    int32_t *sums;                  /* n_packets x k (WorkerCore._sums) */
    float *values;                  /* n_packets x k, the sums dequantized with scale (WorkerCore._values); NULL: an int32 job (scale 0) */
    uint8_t *done;                  /* n_packets (WorkerCore._done, numpy bool) */
    double *sent_at;                /* n_packets (WorkerCore._sent_at) */
    uint8_t *gap_resent;            /* n_packets (WorkerCore._gap_resent) */
    double *cwnd_log;               /* n_packets + 1: WorkerStats.cwnd, cwnd_count of them */
    int32_t *indices;               /* positions: AggregatorMap.indices */
    uint8_t *used;                  /* pool_size: AggregatorMap._used as a bitmap */
    /* -- WorkerCore's progress -- */
    int64_t done_through, next_packet, marker;
    double cwnd, last_progress;
    int32_t ecn_in_window;
    struct atp_stats stats;
    /* -- the driver (ATPClient._run): its sockets, buffers and timeline -- */
    int32_t rx_fd, tx_fd, rx_capacity, rx_stride, tx_capacity;
    int64_t tx_count;               /* payloads written to tx and not yet sent */
    uint8_t *tx;                    /* tx_capacity payloads */
    uint8_t *rx;                    /* rx_capacity buffers of rx_stride bytes */
    uint32_t *rx_lengths;           /* rx_capacity */
    double t0, deadline_s, timeline_bin_s, signal_check_s;
    int32_t lost_errnos[MAX_ERRNOS], n_lost_errnos;
    int32_t reported_errnos[MAX_ERRNOS], n_reported_errnos;
    int64_t refusals[MAX_ERRNOS];
    int32_t started;
    int64_t *timeline;              /* C owns it (grows with the job): atp_release frees it */
    int64_t timeline_len, timeline_capacity;
    int32_t failed_call, failed_errno;
};

int64_t atp_job_size(void) { return (int64_t)sizeof(struct atp_job); }

/* Every field's offset by "struct.field", for job.py's layout check. */
static const struct field FIELDS[] = {
    FIELD(atp_stats, packets_sent), FIELD(atp_stats, resends_gap), FIELD(atp_stats, resends_timeout), FIELD(atp_stats, results),
    FIELD(atp_stats, duplicates), FIELD(atp_stats, ignored), FIELD(atp_stats, collisions_adopted), FIELD(atp_stats, ecn_results),
    FIELD(atp_stats, window_halvings), FIELD(atp_stats, cwnd_count), FIELD(atp_stats, malformed), FIELD(atp_stats, received_bytes),
    FIELD(atp_job, app_id), FIELD(atp_job, worker_id), FIELD(atp_job, n_workers), FIELD(atp_job, k), FIELD(atp_job, congestion_control),
    FIELD(atp_job, positions), FIELD(atp_job, pool_size), FIELD(atp_job, payload_bytes), FIELD(atp_job, n_packets),
    FIELD(atp_job, seq_base), FIELD(atp_job, resend_timeout_s), FIELD(atp_job, stall_s),
    FIELD(atp_job, first_resend_timeout_s), FIELD(atp_job, scale), FIELD(atp_job, frame_s), FIELD(atp_job, chunks), FIELD(atp_job, sums), FIELD(atp_job, values),
    FIELD(atp_job, done), FIELD(atp_job, sent_at), FIELD(atp_job, gap_resent), FIELD(atp_job, cwnd_log), FIELD(atp_job, indices),
    FIELD(atp_job, used), FIELD(atp_job, done_through), FIELD(atp_job, next_packet), FIELD(atp_job, marker), FIELD(atp_job, cwnd),
    FIELD(atp_job, last_progress), FIELD(atp_job, ecn_in_window), FIELD(atp_job, stats), FIELD(atp_job, rx_fd), FIELD(atp_job, tx_fd),
    FIELD(atp_job, rx_capacity), FIELD(atp_job, rx_stride), FIELD(atp_job, tx_capacity), FIELD(atp_job, tx_count), FIELD(atp_job, tx),
    FIELD(atp_job, rx), FIELD(atp_job, rx_lengths), FIELD(atp_job, t0), FIELD(atp_job, deadline_s), FIELD(atp_job, timeline_bin_s),
    FIELD(atp_job, signal_check_s), FIELD(atp_job, lost_errnos), FIELD(atp_job, n_lost_errnos), FIELD(atp_job, reported_errnos),
    FIELD(atp_job, n_reported_errnos), FIELD(atp_job, refusals), FIELD(atp_job, started), FIELD(atp_job, timeline),
    FIELD(atp_job, timeline_len), FIELD(atp_job, timeline_capacity), FIELD(atp_job, failed_call), FIELD(atp_job, failed_errno),
};

int64_t atp_field_count(void) { return (int64_t)(sizeof FIELDS / sizeof FIELDS[0]); }

/* The offset of field "struct.field" (e.g. "atp_job.k"), -1 for a name this file lacks. */
int64_t atp_field_offset(const char *name) { return field_offset(FIELDS, sizeof FIELDS / sizeof FIELDS[0], name); }

void atp_release(struct atp_job *job)
{
    free(job->timeline);
    job->timeline = NULL;
    job->timeline_len = job->timeline_capacity = 0;
}

/* ---- AggregatorMap ------------------------------------------------------------------ */

/* AggregatorMap.index: the aggregator packet ``packet`` claims. */
static int32_t map_index(const struct atp_job *job, int64_t packet) { return job->indices[packet % job->positions]; }

/* AggregatorMap.adopt: re-point the position of ``packet`` to ``new_index`` unless it is out
 * of the pool or another position of the job holds it; returns whether it moved. */
static int map_adopt(struct atp_job *job, int64_t packet, uint32_t new_index)
{
    if (new_index >= (uint32_t)job->pool_size || job->used[new_index])
        return 0;
    int64_t position = packet % job->positions;
    job->used[job->indices[position]] = 0;
    job->used[new_index] = 1;
    job->indices[position] = (int32_t)new_index;
    return 1;
}

/* ---- WorkerCore: what the driver asks ------------------------------------------------ */

static int finished(const struct atp_job *job) { return job->done_through == job->n_packets; }

/* WorkerCore.window */
static int64_t window(const struct atp_job *job)
{
    if (!job->congestion_control)
        return job->positions;
    int64_t cwnd = (int64_t)job->cwnd;
    if (cwnd < 1)
        cwnd = 1;
    return cwnd < job->positions ? cwnd : job->positions;
}

/* WorkerCore.resend_timeout_s */
static double resend_timeout(const struct atp_job *job)
{
    if (job->stats.results || job->first_resend_timeout_s < job->resend_timeout_s)
        return job->resend_timeout_s;
    return job->first_resend_timeout_s;
}

/* WorkerCore.hold_s: how long the loop lets results gather after a batch of ``received``. */
static double hold_s(const struct atp_job *job, int64_t received)
{
    int64_t w = window(job);
    if (!job->frame_s || received >= HOLD_BELOW_SHARE * w || job->n_packets - job->next_packet < w)
        return 0.0;
    double hold = HOLD_SHARE * w * job->frame_s;
    return hold < HOLD_MAX_S ? hold : HOLD_MAX_S;
}

/* WorkerCore.next_timer; INFINITY for None (finished). */
static double next_timer(const struct atp_job *job)
{
    if (finished(job))
        return INFINITY;
    double earliest = INFINITY;
    for (int64_t p = job->done_through; p < job->next_packet; p++)
        if (job->sent_at[p] < earliest)
            earliest = job->sent_at[p];
    double resend = earliest + resend_timeout(job); /* inf with nothing in flight */
    double stall = job->last_progress + job->stall_s;
    return resend < stall ? resend : stall;
}

/* ---- WorkerCore: sending ------------------------------------------------------------- */

/* WorkerCore._payload, written at tx[tx_count++]. */
static void payload(struct atp_job *job, int64_t packet, uint8_t flags)
{
    uint8_t *out = job->tx + job->tx_count * job->payload_bytes;
    put_be32(out + F_BITMAP, (uint32_t)1 << job->worker_id);
    out[F_FAN_IN] = (uint8_t)job->n_workers;
    out[F_FLAGS] = flags;
    put_be16(out + F_APP_ID, (uint32_t)job->app_id);
    put_be32(out + F_SEQ, job->seq_base + (uint32_t)packet);
    put_be16(out + F_AGTR, (uint32_t)map_index(job, packet));
    put_be16(out + F_NEW_AGTR, ATP_NO_INDEX);
    if (job->values) { /* protocol.quantize.quantize: round half to even of float64(x) * scale (within int32: the job's bound) */
        const float *x = (const float *)job->chunks + packet * job->k;
        for (int32_t i = 0; i < job->k; i++)
            put_be32(out + ATP_HEADER_BYTES + 4 * i, (uint32_t)(int32_t)nearbyint((double)x[i] * job->scale));
    } else {
        const int32_t *values = (const int32_t *)job->chunks + packet * job->k;
        for (int32_t i = 0; i < job->k; i++)
            put_be32(out + ATP_HEADER_BYTES + 4 * i, (uint32_t)values[i]);
    }
    job->tx_count++;
}

/* WorkerCore._fill: the packets the window lets leave; returns how many. */
static int64_t fill(struct atp_job *job, double now)
{
    int64_t limit = job->done_through + window(job), count = 0;
    if (limit > job->n_packets)
        limit = job->n_packets;
    while (job->next_packet < limit) {
        payload(job, job->next_packet, 0);
        job->sent_at[job->next_packet] = now;
        job->next_packet++;
        count++;
    }
    job->stats.packets_sent += count;
    return count;
}

/* WorkerCore._resend, one packet (the Python call takes an array of them, in order). */
static void resend(struct atp_job *job, int64_t packet, double now)
{
    job->sent_at[packet] = now;
    job->stats.packets_sent++;
    payload(job, packet, ATP_FLAG_RESEND);
}

/* WorkerCore.start: the first window. */
static int64_t start(struct atp_job *job, double now)
{
    int64_t count = fill(job, now);
    job->marker = job->next_packet - 1;
    return count;
}

/* WorkerCore.expire: a timeout resends the first and the last overdue packet (cause
 * "timeout"), lets every overdue packet be resent once more on a gap and restarts the timer of
 * every packet waiting; returns how many it resent, or -1 when the worker stalled (ATPStalled). */
static int64_t expire(struct atp_job *job, double now)
{
    if (finished(job))
        return 0;
    if (now - job->last_progress >= job->stall_s)
        return -1;
    int64_t first = -1, last = -1;
    double timeout = resend_timeout(job);
    for (int64_t p = job->done_through; p < job->next_packet; p++) {
        if (job->sent_at[p] + timeout <= now) { /* a packet with its result is never due (INFINITY) */
            job->gap_resent[p] = 0;
            if (first < 0)
                first = p;
            last = p;
        }
    }
    if (first < 0)
        return 0;
    for (int64_t p = job->done_through; p < job->next_packet; p++)
        if (isfinite(job->sent_at[p]))
            job->sent_at[p] = now;
    resend(job, first, now);
    if (last != first)
        resend(job, last, now);
    int64_t count = last != first ? 2 : 1;
    job->stats.resends_timeout += count;
    return count;
}

/* ---- WorkerCore: receiving ----------------------------------------------------------- */

/* WorkerCore._resend_gap: a result beyond packets still waiting resends each of them once. */
static int64_t resend_gap(struct atp_job *job, int64_t packet, double now)
{
    int64_t count = 0;
    for (int64_t p = job->done_through; p < packet; p++) {
        if (!job->done[p] && !job->gap_resent[p]) {
            job->gap_resent[p] = 1;
            resend(job, p, now);
            count++;
        }
    }
    job->stats.resends_gap += count;
    return count;
}

/* WorkerCore._adjust_window: AIMD, once per window of packets. */
static void adjust_window(struct atp_job *job)
{
    if (job->congestion_control) {
        if (job->ecn_in_window) {
            job->cwnd = job->cwnd / 2 > 1.0 ? job->cwnd / 2 : 1.0;
            job->stats.window_halvings++;
        } else {
            job->cwnd = job->cwnd + 1 < (double)job->positions ? job->cwnd + 1 : (double)job->positions;
        }
        job->cwnd_log[job->stats.cwnd_count++] = job->cwnd;
    }
    job->ecn_in_window = 0;
    int64_t end = job->done_through + window(job);
    job->marker = (end < job->n_packets ? end : job->n_packets) - 1;
}

/* WorkerCore.receive: take one datagram of ``length`` bytes; returns how many payloads it
 * wrote to tx: at most 2W - 1, as a result is only taken for a packet already sent, which is
 * within W of done_through (its gap's resends, and a window). */
static int64_t receive(struct atp_job *job, const uint8_t *datagram, int64_t length, double now)
{
    int64_t packet = -1;
    uint8_t flags = 0;
    if (length == job->payload_bytes) {
        flags = datagram[F_FLAGS];
        packet = (int64_t)get_be32(datagram + F_SEQ) - (int64_t)job->seq_base;
        if (!(flags & ATP_FLAG_ACK) || get_be16(datagram + F_APP_ID) != (uint32_t)job->app_id || packet < 0 || packet >= job->next_packet)
            packet = -1;
    }
    if (packet < 0) {
        job->stats.ignored++;
        return 0;
    }
    if (job->done[packet]) {
        job->stats.duplicates++;
        return 0;
    }
    job->done[packet] = 1;
    job->sent_at[packet] = INFINITY;
    int32_t *sums = job->sums + packet * job->k;
    for (int32_t i = 0; i < job->k; i++)
        sums[i] = (int32_t)get_be32(datagram + ATP_HEADER_BYTES + 4 * i);
    if (job->values) { /* protocol.quantize.dequantize: float32(float64(sum) / scale), +-inf beyond float32 */
        float *values = job->values + packet * job->k;
        for (int32_t i = 0; i < job->k; i++)
            values[i] = (float)((double)sums[i] / job->scale);
    }
    job->stats.results++;
    job->last_progress = now;
    if (flags & ATP_FLAG_COLLISION && map_adopt(job, packet, get_be16(datagram + F_NEW_AGTR)))
        job->stats.collisions_adopted++;
    if (flags & ATP_FLAG_ECN) {
        job->stats.ecn_results++;
        job->ecn_in_window = 1;
    }
    int64_t count = resend_gap(job, packet, now);
    while (job->done_through < job->n_packets && job->done[job->done_through])
        job->done_through++;
    if (job->done_through > job->marker)
        adjust_window(job);
    return count + fill(job, now);
}

/* start, receive, expire, next_timer, hold_s and window for a driver outside C (tests/test_native_atp.py
 * holds them to worker.py's): each writes its payloads to tx from tx_count on. */
int64_t atp_start(struct atp_job *job, double now) { return start(job, now); }
int64_t atp_receive(struct atp_job *job, const uint8_t *datagram, int64_t length, double now) { return receive(job, datagram, length, now); }
int64_t atp_expire(struct atp_job *job, double now) { return expire(job, now); }
double atp_next_timer(const struct atp_job *job) { return next_timer(job); }
double atp_hold_s(const struct atp_job *job, int64_t received) { return hold_s(job, received); }
int64_t atp_window(const struct atp_job *job) { return window(job); }

/* ---- the driver (ATPClient._run) --------------------------------------------------------- */

static int fail(struct atp_job *job, int call, int code)
{
    job->failed_call = call;
    job->failed_errno = code;
    return ATP_FAILED;
}

/* ATPClient._send: tx[:tx_count] at ``now``, counted in the send timeline (SendTimeline.record). */
static int flush(struct atp_job *job, struct mmsghdr *table, double now, const struct errno_tables *errnos)
{
    int64_t count = job->tx_count;
    if (!count)
        return 0;
    job->tx_count = 0;
    if (send_batch(job->tx_fd, table, count, errnos))
        return fail(job, CALL_SENDMMSG, errno);
    if (timeline_add(&job->timeline, &job->timeline_len, &job->timeline_capacity, job->t0, job->timeline_bin_s, now, count))
        return fail(job, CALL_MALLOC, ENOMEM);
    return 0;
}

/* The loop: results in batches (after a small one, a hold: hold_s), timers when idle, until every packet has its result. A
 * receive writes at most 2W - 1 payloads (its gap's resends and a window), so tx is sent
 * whenever fewer than 2W places are left, and once after the batch. */
static int run(struct atp_job *job, struct mmsghdr *tx_table, struct mmsghdr *rx_table)
{
    struct errno_tables errnos = {job->lost_errnos, job->n_lost_errnos, job->reported_errnos, job->n_reported_errnos, job->refusals};
    double return_at = clock_now() + job->signal_check_s, deadline = job->t0 + job->deadline_s;
    if (!job->started) {
        double now = clock_now(); /* after quantizing: the first window's send time, as client.py's */
        job->started = 1;
        start(job, now);
        if (flush(job, tx_table, now, &errnos))
            return ATP_FAILED;
    }
    while (!finished(job)) {
        int64_t count = receive_batch(job->rx_fd, rx_table, job->rx_capacity, job->rx_lengths, &errnos);
        if (count < 0)
            return fail(job, CALL_RECVMMSG, errno);
        double now = clock_now();
        if (count == 0) {
            if (next_timer(job) <= now) {
                if (expire(job, now) < 0)
                    return ATP_STALLED;
                if (flush(job, tx_table, now, &errnos))
                    return ATP_FAILED;
            }
            if (now >= deadline)
                return ATP_TIMED_OUT;
            if (now >= return_at)
                return ATP_INTERRUPTED;
            double due = next_timer(job), wake = due < deadline ? due : deadline;
            if (return_at < wake)
                wake = return_at;
            /* poll's whole milliseconds, rounded up, as the Python loop waits */
            struct timespec wait = span(ceil((wake - now) * 1000) / 1000);
            struct pollfd pfd = {.fd = job->rx_fd, .events = POLLIN};
            if (ppoll(&pfd, 1, &wait, NULL) < 0) {
                if (errno == EINTR)
                    return ATP_INTERRUPTED;
                return fail(job, CALL_POLL, errno);
            }
            continue;
        }
        for (int64_t i = 0; i < count; i++) {
            job->stats.received_bytes += job->rx_lengths[i];
            if (job->rx_lengths[i] != (uint32_t)job->payload_bytes) {
                job->stats.malformed++;
                continue;
            }
            if (job->tx_count + 2 * job->positions > job->tx_capacity && flush(job, tx_table, now, &errnos))
                return ATP_FAILED;
            receive(job, job->rx + i * job->rx_stride, job->payload_bytes, now);
        }
        if (flush(job, tx_table, now, &errnos))
            return ATP_FAILED;
        if (now >= return_at)
            return ATP_INTERRUPTED;
        double hold = hold_s(job, count);
        if (hold > 0) { /* as client.py's time.sleep */
            struct timespec wait = span(hold);
            if (nanosleep(&wait, NULL) < 0 && errno == EINTR)
                return ATP_INTERRUPTED;
        }
    }
    return ATP_DONE;
}

/* Run the all-reduce until it is done (ATP_DONE), its deadline passes (ATP_TIMED_OUT), no
 * result came for stall_s (ATP_STALLED), a signal arrives or signal_check_s passed
 * (ATP_INTERRUPTED: Python runs any pending handler and calls again) or a call fails
 * (ATP_FAILED: failed_call and failed_errno say which). */
int atp_run(struct atp_job *job)
{
    struct batch_tables tables;
    int status;
    if (batch_tables_make(&tables, job->tx, job->payload_bytes, job->tx_capacity, job->rx, job->rx_stride, job->rx_capacity))
        status = fail(job, CALL_MALLOC, ENOMEM);
    else
        status = run(job, tables.tx, tables.rx);
    batch_tables_free(&tables);
    return status;
}
