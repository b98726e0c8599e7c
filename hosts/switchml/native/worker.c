/*
 * worker.c -- the SwitchML worker's data path in C: hosts/switchml/core.py and the driver
 * of hosts/switchml/job.py, function for function, with the same names.
 *
 * Why it exists: a Python worker spends 24-27 us of user time per packet at k = 256, and
 * eight of them on two cores set the emulator's pace instead of the links (issue 27). The
 * Python core stays the reference that the labs and docs teach; this file is its
 * translation, and tests/test_native_worker.py runs both on the same results and
 * demands the same packets, bit for bit.
 *
 * Python (hosts/switchml/native/job.py) plans the job, computes the block exponents,
 * allocates every array and fills struct sml_job; sml_run then runs the job's whole
 * send/receive loop over the connected, non-blocking UDP socket and returns when the
 * job is done, its deadline passed, a signal arrived (Python runs its handlers and calls
 * again: every piece of progress lives in the struct), or a system call failed. The loop's
 * policy is the core's (start, step: what to send, when to call again); sml_run and
 * simulation/switchml/native/star.c's event loop only do the I/O it asks for, and sml_step lets a
 * differential test drive the core directly.
 *
 * The arithmetic is protocol/quantize.py's: x (float32) times the block's scale in
 * double, rounded half to even (rint in the default rounding mode), as int32; a result's
 * sums divided by the scale in double, as float32. Built without -ffast-math and with
 * -ffp-contract=off, so every product and quotient is the one numpy computes. Unlike the
 * Python worker, which dequantizes the whole tensor once the last result is in, this loop
 * dequantizes each chunk as its result arrives: the same numbers, but no worker ends its
 * job with 10 ms of arithmetic (1.8M elements) while the others wait for a core.
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

#define EXPONENT_MIN (-128)
#define SEQ_MASK 0xFFFFFFFFu
#define RTT_WINDOW 64           /* RoundTripEstimator.WINDOW */
#define HOLD_SHARE 0.75         /* core.HOLD_SHARE */
#define HOLD_BELOW_SHARE 0.9    /* core.HOLD_BELOW_SHARE */
#define HOLD_MAX_S 0.010        /* core.HOLD_MAX_S */

/* Offsets of switchml_h's fields in a payload (protocol.switchml.packet.payload_dtype). */
enum { F_MSG_TYPE = 0, F_SHADOW_SET = 1, F_JOB_ID = 2, F_SLOT = 4, F_NUM_ELEMENTS = 6, F_EXPONENT = 8, F_SEQ = 9 };

/* What sml_run returns; a step's status (core.RUNNING, DONE, TIMED_OUT; SML_FAILED: no memory). */
enum { SML_DONE = 0, SML_TIMED_OUT = 1, SML_INTERRUPTED = 2, SML_FAILED = 3, SML_RUNNING = 4 };
/* Which call failed (sml_job.failed_call) when SML_FAILED. */
enum { CALL_NONE = 0, CALL_SENDMMSG = 1, CALL_RECVMMSG = 2, CALL_PPOLL = 3, CALL_MALLOC = 4 };

/* RoundTripEstimator (hosts/switchml/timers.py): the median of the last RTT_WINDOW round
 * trips, and the shortest ever. Kept by the client across its jobs. */
struct sml_rtt {
    double ring[RTT_WINDOW];
    int64_t count;
    double shortest;          /* INFINITY before the first sample */
    double median;
    int32_t median_valid;
};

/* RetransmitPolicy. */
struct sml_policy {
    double min_s, max_s, first_s;
    int64_t backoff_every;
};

/* JobStats, without tat_s, the timeline and socket_errors (Python has those; refusals below). */
struct sml_stats {
    int64_t packets_sent, packets_received, retransmissions, timeouts, duplicates, bytes_sent, bytes_received;
    int64_t rejected_results;
};

/* core.Step: send tx[:send]; while SML_RUNNING, receive at wake_at (at the latest; at once
 * when a datagram arrives if on_arrival) and call step. */
struct sml_step {
    int64_t send;
    double wake_at;
    int32_t on_arrival, status;
};

struct sml_job {
    /* -- the plan and the job's arrays: Python fills them, C never allocates them -- */
    int32_t fd, k, n_slots, n_chunks, lead, total_packets, quantized, capacity;
    int32_t record_bytes, rx_stride;
    uint32_t job_id, seq_base;
    double t0, deadline_s, timeline_bin_s;
    double signal_check_s;          /* sml_run returns at least this often, so Python runs signal handlers */
    struct sml_policy policy;
    const void *chunks;             /* float32 or int32, n_chunks x k */
    const int8_t *packet_exponents; /* total_packets */
    const double *scales;           /* 256: scale_for(e) at e - EXPONENT_MIN */
    int8_t *e_max;                  /* n_chunks */
    int32_t *sums;                  /* n_chunks x k, native byte order */
    float *values;                  /* n_chunks x k: the sums dequantized (float32 jobs; NULL for int32) */
    uint8_t *shadow_set;            /* SlotPool.shadow_set (pool_size) */
    uint8_t *pool_packets;          /* SlotPool.packets (pool_size records) */
    int64_t *outstanding;           /* n_slots: the packet each slot waits for, -1 done */
    uint8_t *tx;                    /* capacity records */
    uint8_t *rx;                    /* capacity buffers of rx_stride bytes */
    uint32_t *rx_lengths;           /* capacity */
    struct sml_rtt *rtt;
    /* SlotTimers, one entry per slot */
    double *deadline, *backoff, *sent_at;
    int64_t *token, *timeouts_per_slot;
    uint8_t *resent;
    int64_t *scratch;               /* 5 x capacity + 4 x n_slots: one step's working arrays (struct scratch) */
    /* errnos that mean "lost" (mmsg.SEND_LOST_ERRNOS) and those a receive reports for an
     * earlier datagram (mmsg.REPORTED_ERRNOS); refusals[i] counts lost_errnos[i]. */
    int32_t lost_errnos[MAX_ERRNOS], n_lost_errnos;
    int32_t reported_errnos[MAX_ERRNOS], n_reported_errnos;
    int64_t refusals[MAX_ERRNOS];
    /* -- progress: kept in the struct so that sml_run can return and be called again -- */
    int32_t started;
    int64_t unsent, remaining, since_timer_check, batch;
    int32_t answered;
    struct sml_stats stats;
    int64_t *timeline;              /* C owns it (grows with the job): sml_release frees it */
    int64_t timeline_len, timeline_capacity;
    int32_t failed_call, failed_errno;
};

int64_t sml_job_size(void) { return (int64_t)sizeof(struct sml_job); }
int64_t sml_rtt_size(void) { return (int64_t)sizeof(struct sml_rtt); }

/* Every field's offset by "struct.field", for job.py's layout check (two swapped fields of
 * one size keep the struct's size: only the offsets tell). */
static const struct field FIELDS[] = {
    FIELD(sml_rtt, ring), FIELD(sml_rtt, count), FIELD(sml_rtt, shortest), FIELD(sml_rtt, median), FIELD(sml_rtt, median_valid),
    FIELD(sml_policy, min_s), FIELD(sml_policy, max_s), FIELD(sml_policy, first_s), FIELD(sml_policy, backoff_every),
    FIELD(sml_stats, packets_sent), FIELD(sml_stats, packets_received), FIELD(sml_stats, retransmissions),
    FIELD(sml_stats, timeouts), FIELD(sml_stats, duplicates), FIELD(sml_stats, bytes_sent), FIELD(sml_stats, bytes_received),
    FIELD(sml_stats, rejected_results),
    FIELD(sml_job, fd), FIELD(sml_job, k), FIELD(sml_job, n_slots), FIELD(sml_job, n_chunks), FIELD(sml_job, lead),
    FIELD(sml_job, total_packets), FIELD(sml_job, quantized), FIELD(sml_job, capacity), FIELD(sml_job, record_bytes),
    FIELD(sml_job, rx_stride), FIELD(sml_job, job_id), FIELD(sml_job, seq_base), FIELD(sml_job, t0), FIELD(sml_job, deadline_s),
    FIELD(sml_job, timeline_bin_s), FIELD(sml_job, signal_check_s), FIELD(sml_job, policy), FIELD(sml_job, chunks),
    FIELD(sml_job, packet_exponents), FIELD(sml_job, scales), FIELD(sml_job, e_max), FIELD(sml_job, sums), FIELD(sml_job, values),
    FIELD(sml_job, shadow_set), FIELD(sml_job, pool_packets), FIELD(sml_job, outstanding), FIELD(sml_job, tx), FIELD(sml_job, rx),
    FIELD(sml_job, rx_lengths), FIELD(sml_job, rtt), FIELD(sml_job, deadline), FIELD(sml_job, backoff), FIELD(sml_job, sent_at),
    FIELD(sml_job, token), FIELD(sml_job, timeouts_per_slot), FIELD(sml_job, resent), FIELD(sml_job, scratch), FIELD(sml_job, lost_errnos),
    FIELD(sml_job, n_lost_errnos), FIELD(sml_job, reported_errnos), FIELD(sml_job, n_reported_errnos), FIELD(sml_job, refusals),
    FIELD(sml_job, started), FIELD(sml_job, unsent), FIELD(sml_job, remaining), FIELD(sml_job, since_timer_check), FIELD(sml_job, batch),
    FIELD(sml_job, answered), FIELD(sml_job, stats), FIELD(sml_job, timeline), FIELD(sml_job, timeline_len),
    FIELD(sml_job, timeline_capacity), FIELD(sml_job, failed_call), FIELD(sml_job, failed_errno),
    FIELD(sml_step, send), FIELD(sml_step, wake_at), FIELD(sml_step, on_arrival), FIELD(sml_step, status),
};

int64_t sml_field_count(void) { return (int64_t)(sizeof FIELDS / sizeof FIELDS[0]); }

/* The offset of field "struct.field" (e.g. "sml_job.fd"), -1 for a name this file lacks. */
int64_t sml_field_offset(const char *name) { return field_offset(FIELDS, sizeof FIELDS / sizeof FIELDS[0], name); }

void sml_release(struct sml_job *job)
{
    free(job->timeline);
    job->timeline = NULL;
    job->timeline_len = job->timeline_capacity = 0;
}

/* ---- RoundTripEstimator ------------------------------------------------------------ */

static void rtt_sample(struct sml_rtt *rtt, double sample)
{
    if (sample < rtt->shortest)
        rtt->shortest = sample;
    rtt->ring[rtt->count % RTT_WINDOW] = sample;
    rtt->count++;
    rtt->median_valid = 0;
}

/* The median of the recent samples, the upper one of an even count (np.partition's). */
static double rtt_median(struct sml_rtt *rtt)
{
    if (!rtt->median_valid) {
        int n = rtt->count < RTT_WINDOW ? (int)rtt->count : RTT_WINDOW;
        double sorted[RTT_WINDOW];
        for (int i = 0; i < n; i++) { /* insertion sort: at most 64 samples, once per batch */
            double v = rtt->ring[i];
            int j = i;
            for (; j > 0 && sorted[j - 1] > v; j--)
                sorted[j] = sorted[j - 1];
            sorted[j] = v;
        }
        rtt->median = sorted[n / 2];
        rtt->median_valid = 1;
    }
    return rtt->median;
}

static double rtt_queueing(struct sml_rtt *rtt)
{
    return rtt->count == 0 ? 0.0 : rtt_median(rtt) - rtt->shortest;
}

static double rtt_timeout(struct sml_rtt *rtt, double floor_s, double first_s)
{
    if (rtt->count == 0)
        return first_s;
    double twice = 2 * rtt_median(rtt);
    return twice > floor_s ? twice : floor_s;
}

/* core.hold_time */
static double hold_time(struct sml_rtt *rtt)
{
    if (rtt->count == 0)
        return 0.0;
    double queueing = rtt_queueing(rtt);
    if (queueing <= rtt->shortest)
        return 0.0;
    double hold = HOLD_SHARE * queueing;
    return hold < HOLD_MAX_S ? hold : HOLD_MAX_S;
}

/* ---- SlotTimers --------------------------------------------------------------------- */

/* arm() for a batch: one timeout for all, as the Python call computes it once. */
static void timers_arm(struct sml_job *job, const int64_t *slots, const int64_t *tokens, int64_t count, double now, int resend)
{
    const struct sml_policy *policy = &job->policy;
    double timeout = rtt_timeout(job->rtt, policy->min_s, policy->first_s);
    for (int64_t i = 0; i < count; i++) {
        int64_t s = slots[i];
        if (!resend)
            job->sent_at[s] = now;
        job->resent[s] = (uint8_t)resend;
        job->token[s] = tokens[i];
        double wait = timeout * job->backoff[s];
        job->deadline[s] = now + (wait < policy->max_s ? wait : policy->max_s);
    }
}

static void timers_answered(struct sml_job *job, const int64_t *slots, int64_t count, double now)
{
    for (int64_t i = 0; i < count; i++) {
        int64_t s = slots[i];
        if (!job->resent[s]) {
            rtt_sample(job->rtt, now - job->sent_at[s]);
            job->backoff[s] = 1.0;
        }
    }
}

static void timers_disarm(struct sml_job *job, int64_t slot)
{
    job->deadline[slot] = INFINITY;
    job->token[slot] = -1;
}

/* next_deadline(); INFINITY when no slot is armed. */
static double timers_next_deadline(const struct sml_job *job)
{
    double earliest = INFINITY;
    for (int32_t s = 0; s < job->n_slots; s++)
        if (job->deadline[s] < earliest)
            earliest = job->deadline[s];
    return earliest;
}

/* pop_expired(): the expired slots in slot order, counted, backed off every backoff_every-th. */
static int64_t timers_pop_expired(struct sml_job *job, double now, int64_t *slots, int64_t *tokens)
{
    int64_t count = 0;
    for (int32_t s = 0; s < job->n_slots; s++) {
        if (job->deadline[s] <= now) {
            slots[count] = s;
            tokens[count] = job->token[s];
            count++;
            timers_disarm(job, s);
            job->timeouts_per_slot[s]++;
            if (job->timeouts_per_slot[s] % job->policy.backoff_every == 0)
                job->backoff[s] *= 2.0;
        }
    }
    return count;
}

/* ---- WorkerCore: sending ------------------------------------------------------------ */

/* A step's working arrays (per slot, or per datagram of a batch), laid out in job->scratch;
 * ``taken`` outlives the step: a slot's entry is the last batch that accepted its result. */
struct scratch {
    int64_t *index, *slots, *packets, *more_slots, *more_packets, *expired_slots, *expired_tokens, *taken;
};

static struct scratch scratch_of(const struct sml_job *job)
{
    int64_t *a = job->scratch, capacity = job->capacity, slots = job->n_slots;
    return (struct scratch){
        .index = a, .slots = a + capacity, .packets = a + 2 * capacity, .more_slots = a + 3 * capacity,
        .more_packets = a + 4 * capacity, .expired_slots = a + 5 * capacity, .expired_tokens = a + 5 * capacity + slots,
        .taken = a + 5 * capacity + 2 * slots,
    };
}

/* SendTimeline.record and JobStats' send counters. */
static int sent(struct sml_job *job, int64_t count, double now, int64_t resent_count)
{
    job->stats.packets_sent += count;
    job->stats.bytes_sent += count * job->record_bytes;
    job->stats.retransmissions += resent_count;
    return timeline_add(&job->timeline, &job->timeline_len, &job->timeline_capacity, job->t0, job->timeline_bin_s, now, count);
}

/* The elements of chunk ``chunk`` as they go on the wire, big-endian: quantized with the
 * chunk's e_max, or the int32 values as they are (core._chunk_data). */
static void chunk_data(const struct sml_job *job, int64_t chunk, uint8_t *out)
{
    int32_t k = job->k;
    if (job->quantized) {
        const float *x = (const float *)job->chunks + chunk * k;
        double scale = job->scales[job->e_max[chunk] - EXPONENT_MIN];
        for (int32_t i = 0; i < k; i++)
            put_be32(out + 4 * i, (uint32_t)(int32_t)lrint((double)x[i] * scale));
    } else {
        const int32_t *x = (const int32_t *)job->chunks + chunk * k;
        for (int32_t i = 0; i < k; i++)
            put_be32(out + 4 * i, (uint32_t)x[i]);
    }
}

/* core._send_next: packet packets[i] for slot slots[i] into tx[at + i]. */
static int64_t send_next(struct sml_job *job, const int64_t *slots, const int64_t *packets, int64_t count, double now, int64_t at)
{
    for (int64_t i = 0; i < count; i++) {
        int64_t slot = slots[i], packet = packets[i], chunk = packet - job->lead;
        uint8_t *record = job->tx + (at + i) * job->record_bytes;
        record[F_MSG_TYPE] = SWITCHML_MSG_UPDATE;
        record[F_SHADOW_SET] = job->shadow_set[slot];
        put_be16(record + F_JOB_ID, job->job_id);
        put_be16(record + F_SLOT, (uint32_t)slot);
        put_be16(record + F_NUM_ELEMENTS, (uint32_t)job->k);
        record[F_EXPONENT] = (uint8_t)job->packet_exponents[packet];
        put_be32(record + F_SEQ, (uint32_t)((job->seq_base + (uint64_t)packet) & SEQ_MASK));
        if (chunk >= 0)
            chunk_data(job, chunk, record + SWITCHML_HEADER_BYTES);
        else /* the lookahead round: exponent-only packets carry zeros */
            memset(record + SWITCHML_HEADER_BYTES, 0, (size_t)job->k * 4);
        memcpy(job->pool_packets + slot * job->record_bytes, record, (size_t)job->record_bytes);
        job->outstanding[slot] = packet;
    }
    if (sent(job, count, now, 0))
        return -1;
    timers_arm(job, slots, packets, count, now, 0);
    job->unsent -= count;
    return at + count;
}

/* core.expire: resend every expired slot from tx[at] on. */
static int64_t expire(struct sml_job *job, double now, int64_t at, int64_t *slots, int64_t *tokens)
{
    job->since_timer_check = 0;
    int64_t count = timers_pop_expired(job, now, slots, tokens);
    if (!count)
        return at;
    for (int64_t i = 0; i < count; i++)
        memcpy(job->tx + (at + i) * job->record_bytes, job->pool_packets + slots[i] * job->record_bytes, (size_t)job->record_bytes);
    job->stats.timeouts += count;
    if (sent(job, count, now, count))
        return -1;
    timers_arm(job, slots, tokens, count, now, 1);
    return at + count;
}

/* ---- WorkerCore: receiving ---------------------------------------------------------- */

/* core._accept: the datagrams of rx[:count] this job waits for, one per slot (the first
 * if a result arrived twice), checked against the state before the batch; a result whose
 * exponent is below the one this worker sent is refused and counted (rejected_results). */
static int64_t accept_results(struct sml_job *job, int64_t count, int64_t batch, struct scratch *s)
{
    int64_t accepted = 0;
    for (int64_t i = 0; i < count; i++) {
        const uint8_t *record = job->rx + i * job->rx_stride;
        if (job->rx_lengths[i] != (uint32_t)job->record_bytes || record[F_MSG_TYPE] != SWITCHML_MSG_RESULT
            || get_be16(record + F_JOB_ID) != job->job_id || get_be16(record + F_NUM_ELEMENTS) != (uint32_t)job->k)
            continue;
        int64_t slot = get_be16(record + F_SLOT);
        if (slot >= job->n_slots)
            continue;
        int64_t packet = (int64_t)((get_be32(record + F_SEQ) - job->seq_base) & SEQ_MASK);
        if (job->outstanding[slot] != packet || job->shadow_set[slot] != record[F_SHADOW_SET])
            continue;
        if (job->quantized && (int8_t)record[F_EXPONENT] < job->packet_exponents[packet]) {
            job->stats.rejected_results++; /* below this worker's own exponent: no correct switch sends it */
            continue;
        }
        if (s->taken[slot] == batch)
            continue;
        s->taken[slot] = batch;
        s->index[accepted] = i;
        s->slots[accepted] = slot;
        s->packets[accepted] = packet;
        accepted++;
    }
    return accepted;
}

/* core._file_results */
static void file_results(struct sml_job *job, int64_t accepted, const struct scratch *s)
{
    for (int64_t a = 0; a < accepted; a++) {
        const uint8_t *record = job->rx + s->index[a] * job->rx_stride;
        int64_t packet = s->packets[a], chunk = packet - job->lead;
        if (job->quantized && packet < job->n_chunks)
            job->e_max[packet] = (int8_t)record[F_EXPONENT];
        if (chunk >= 0) {
            int32_t *sum = job->sums + chunk * job->k;
            const uint8_t *data = record + SWITCHML_HEADER_BYTES;
            for (int32_t e = 0; e < job->k; e++)
                sum[e] = (int32_t)get_be32(data + 4 * e);
            if (job->values) { /* quantize.dequantize, per chunk as it arrives: float32(float64(S) / f) */
                float *value = job->values + chunk * job->k;
                double scale = job->scales[job->e_max[chunk] - EXPONENT_MIN];
                for (int32_t e = 0; e < job->k; e++)
                    value[e] = (float)((double)sum[e] / scale);
            }
        }
        job->shadow_set[s->slots[a]] ^= 1;
    }
}

/* core.receive: file the results of rx[:count], write the next packets (and, every pool's
 * worth of datagrams, the resends) to tx; returns how many. */
static int64_t receive(struct sml_job *job, int64_t count, double now, int64_t batch, struct scratch *s)
{
    job->stats.packets_received += count;
    for (int64_t i = 0; i < count; i++)
        job->stats.bytes_received += job->rx_lengths[i];
    int64_t rejected = job->stats.rejected_results;
    int64_t accepted = accept_results(job, count, batch, s);
    job->stats.duplicates += count - accepted - (job->stats.rejected_results - rejected);
    int64_t sending = 0;
    if (accepted) {
        file_results(job, accepted, s);
        timers_answered(job, s->slots, accepted, now);
        int64_t more = 0;
        for (int64_t a = 0; a < accepted; a++) {
            int64_t following = s->packets[a] + job->n_slots;
            if (following < job->total_packets) {
                s->more_slots[more] = s->slots[a];
                s->more_packets[more] = following;
                more++;
            } else {
                job->outstanding[s->slots[a]] = -1;
                timers_disarm(job, s->slots[a]);
                job->remaining--;
            }
        }
        if (more && (sending = send_next(job, s->more_slots, s->more_packets, more, now, 0)) < 0)
            return -1;
    }
    job->answered = sending > 0;
    job->since_timer_check += count;
    if (job->since_timer_check >= job->n_slots)
        return expire(job, now, sending, s->expired_slots, s->expired_tokens);
    return sending;
}

/* core.hold_s */
static double hold_s(struct sml_job *job, int64_t received)
{
    if (!job->answered || received >= job->n_slots * HOLD_BELOW_SHARE || job->unsent < job->n_slots)
        return 0.0;
    return hold_time(job->rtt);
}

/* ---- WorkerCore: the loop's policy ---------------------------------------------------- */

/* core._next_step: after writing ``count`` packets at ``now`` (-1: no memory), the job's end,
 * its deadline, a hold after a batch of ``received`` results, or a wait for a result, the
 * next timer or the deadline. */
static struct sml_step next_step(struct sml_job *job, double now, int64_t count, int64_t received)
{
    struct sml_step step = {.send = count, .wake_at = INFINITY, .on_arrival = 0, .status = SML_RUNNING};
    double deadline = job->t0 + job->deadline_s;
    if (count < 0) {
        step.send = 0;
        step.status = SML_FAILED;
        job->failed_call = CALL_MALLOC;
        job->failed_errno = ENOMEM;
    } else if (!job->remaining) {
        step.status = SML_DONE;
    } else if (now >= deadline) {
        step.status = SML_TIMED_OUT;
    } else if (received) {
        step.wake_at = now + hold_s(job, received);
    } else {
        double next_timer = timers_next_deadline(job);
        step.wake_at = next_timer > deadline ? deadline : next_timer;
        step.on_arrival = 1;
    }
    return step;
}

/* core.start */
static struct sml_step start(struct sml_job *job, double now)
{
    struct scratch s = scratch_of(job);
    for (int32_t slot = 0; slot < job->n_slots; slot++)
        s.slots[slot] = slot;
    return next_step(job, now, send_next(job, s.slots, s.slots, job->n_slots, now, 0), 0);
}

/* core.step: one turn of the loop at ``now`` with the ``received`` datagrams in rx (none:
 * nothing was waiting, and the expired timers fire). */
static struct sml_step step(struct sml_job *job, double now, int64_t received)
{
    struct scratch s = scratch_of(job);
    int64_t count = received ? receive(job, received, now, ++job->batch, &s) : expire(job, now, 0, s.expired_slots, s.expired_tokens);
    return next_step(job, now, count, received);
}

/* start and step for a driver outside C (tests/test_native_step.py holds them to core.py's). */
struct sml_step sml_start(struct sml_job *job, double now) { return start(job, now); }
struct sml_step sml_step(struct sml_job *job, double now, int64_t received) { return step(job, now, received); }

/* ---- the driver (job.AllReduceJob.run) ---------------------------------------------- */

static int fail(struct sml_job *job, int call, int code)
{
    job->failed_call = call;
    job->failed_errno = code;
    return SML_FAILED;
}

static struct errno_tables errnos_of(struct sml_job *job)
{
    return (struct errno_tables){job->lost_errnos, job->n_lost_errnos, job->reported_errnos, job->n_reported_errnos, job->refusals};
}

/* The core's steps over the socket: what a step wrote is sent, then the loop waits as the
 * step says (in ppoll for a datagram or until wake_at, or asleep: a hold) and receives what
 * is waiting for the next step. */
static int run(struct sml_job *job, struct mmsghdr *tx_table, struct mmsghdr *rx_table)
{
    /* A signal that arrives during a non-blocking call only marks CPython's handler pending;
     * returning at this bound runs it (Ctrl-C under a flood), whatever the loop is doing. */
    double return_at = clock_now() + job->signal_check_s;
    struct errno_tables errnos = errnos_of(job);
    for (;;) {
        double now = clock_now();
        struct sml_step st;
        if (!job->started) {
            st = start(job, now);
            job->started = 1;
        } else {
            int64_t received = receive_batch(job->fd, rx_table, job->capacity, job->rx_lengths, &errnos);
            if (received < 0)
                return fail(job, CALL_RECVMMSG, errno);
            now = clock_now();
            st = step(job, now, received);
        }
        if (st.status == SML_FAILED)
            return SML_FAILED;
        if (st.send && send_batch(job->fd, tx_table, st.send, &errnos))
            return fail(job, CALL_SENDMMSG, errno);
        if (st.status != SML_RUNNING)
            return st.status;
        if (now >= return_at)
            return SML_INTERRUPTED;
        double wake = st.on_arrival && return_at < st.wake_at ? return_at : st.wake_at;
        struct timespec wait = span(wake - clock_now());
        if (st.on_arrival) {
            struct pollfd pfd = {.fd = job->fd, .events = POLLIN};
            if (ppoll(&pfd, 1, &wait, NULL) < 0) {
                if (errno == EINTR)
                    return SML_INTERRUPTED;
                return fail(job, CALL_PPOLL, errno);
            }
        } else if ((wait.tv_sec || wait.tv_nsec) && nanosleep(&wait, NULL) < 0 && errno == EINTR) {
            return SML_INTERRUPTED;
        }
    }
}

/* Run the job until it is done (SML_DONE), its deadline passes (SML_TIMED_OUT), a signal
 * arrives or signal_check_s passed (SML_INTERRUPTED: Python runs any pending handler and
 * calls again) or a call fails (SML_FAILED: failed_call and failed_errno say which). */
int sml_run(struct sml_job *job)
{
    struct batch_tables tables;
    int status;
    if (batch_tables_make(&tables, job->tx, job->record_bytes, job->capacity, job->rx, job->rx_stride, job->capacity))
        status = fail(job, CALL_MALLOC, ENOMEM);
    else
        status = run(job, tables.tx, tables.rx);
    batch_tables_free(&tables);
    return status;
}
