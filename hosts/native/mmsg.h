/*
 * mmsg.h -- what every native worker loop does with its UDP sockets, in C: hosts/mmsg.py's
 * BatchSocket (sendmmsg/recvmmsg over fixed tables), the clock, the wire's byte order.
 *
 * The in-network protocols' C workers (hosts/<protocol>/native/worker.c) include it, so that
 * the refusal rules below are one piece of code, as hosts/mmsg.py is one for the Python
 * workers. Everything here is static: each worker is its own shared library.
 */
#ifndef HOSTS_NATIVE_MMSG_H
#define HOSTS_NATIVE_MMSG_H

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_ERRNOS 16

/* The errnos that mean "lost" (mmsg.SEND_LOST_ERRNOS) and those a send or a receive reports
 * for an earlier datagram (mmsg.REPORTED_ERRNOS); refusals[i] counts lost[i]. The arrays
 * live in the worker's own struct (Python fills them); this points at them. */
struct errno_tables {
    const int32_t *lost;
    int32_t n_lost;
    const int32_t *reported;
    int32_t n_reported;
    int64_t *refusals;
};

static double clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.perf_counter's clock on Linux */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec span(double seconds)
{
    if (seconds < 0)
        seconds = 0;
    struct timespec ts = {.tv_sec = (time_t)seconds};
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    return ts;
}

static void put_be16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put_be32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v; }
static uint32_t get_be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t get_be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static int errno_index(const int32_t *table, int32_t n, int code)
{
    for (int32_t i = 0; i < n; i++)
        if (table[i] == code)
            return i;
    return -1;
}

/* BatchSocket.send: table[:count] in as few calls as the kernel allows; a datagram refused
 * with a "lost" errno is counted and skipped, after one more try where the errno may be an
 * earlier datagram's (a "reported" one: an ICMP error). Returns 0, or -1 with errno set. */
static int send_batch(int fd, struct mmsghdr *table, int64_t count, const struct errno_tables *errnos)
{
    int64_t done = 0;
    int retrying = 0;
    while (done < count) {
        int n = sendmmsg(fd, table + done, (unsigned)(count - done), 0);
        if (n >= 0) {
            done += n;
            retrying = 0;
            continue;
        }
        if (errno == EINTR)
            continue;
        int i = errno_index(errnos->lost, errnos->n_lost, errno);
        if (i < 0)
            return -1;
        if (!retrying) {
            errnos->refusals[i]++;
            if (errno_index(errnos->reported, errnos->n_reported, errno) >= 0) {
                retrying = 1;
                continue;
            }
        }
        retrying = 0;
        done++;
    }
    return 0;
}

/* BatchSocket.receive: what is waiting, up to capacity datagrams, without blocking; their
 * lengths into lengths[]. Returns how many, or -1 with errno set. */
static int64_t receive_batch(int fd, struct mmsghdr *table, int64_t capacity, uint32_t *lengths, const struct errno_tables *errnos)
{
    for (;;) {
        int n = recvmmsg(fd, table, (unsigned)capacity, MSG_DONTWAIT, NULL);
        if (n >= 0) {
            for (int i = 0; i < n; i++)
                lengths[i] = table[i].msg_len;
            return n;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno_index(errnos->reported, errnos->n_reported, errno) < 0)
            return -1;
        int i = errno_index(errnos->lost, errnos->n_lost, errno);
        if (i >= 0)
            errnos->refusals[i]++;
    }
}

/* An mmsghdr per buffer of ``stride`` bytes from ``base``, each one iovec of ``length`` bytes. */
static void message_table(struct mmsghdr *table, struct iovec *iov, uint8_t *base, int64_t stride, int64_t length, int64_t count)
{
    memset(table, 0, (size_t)count * sizeof *table);
    for (int64_t i = 0; i < count; i++) {
        iov[i].iov_base = base + i * stride;
        iov[i].iov_len = (size_t)length;
        table[i].msg_hdr.msg_iov = &iov[i];
        table[i].msg_hdr.msg_iovlen = 1;
    }
}

/* A job's send and receive tables: an mmsghdr and an iovec per buffer. */
struct batch_tables {
    struct mmsghdr *tx, *rx;
    struct iovec *tx_iov, *rx_iov;
};

/* Tables over ``tx_count`` send buffers of ``tx_bytes`` each and ``rx_count`` receive buffers of
 * ``rx_stride`` bytes each. 0, or -1 out of memory (batch_tables_free frees what was made). */
static int batch_tables_make(struct batch_tables *t, uint8_t *tx, int64_t tx_bytes, int64_t tx_count, uint8_t *rx, int64_t rx_stride,
                             int64_t rx_count)
{
    t->tx = malloc((size_t)tx_count * sizeof *t->tx);
    t->rx = malloc((size_t)rx_count * sizeof *t->rx);
    t->tx_iov = malloc((size_t)tx_count * sizeof *t->tx_iov);
    t->rx_iov = malloc((size_t)rx_count * sizeof *t->rx_iov);
    if (!t->tx || !t->rx || !t->tx_iov || !t->rx_iov)
        return -1;
    message_table(t->tx, t->tx_iov, tx, tx_bytes, tx_bytes, tx_count);
    message_table(t->rx, t->rx_iov, rx, rx_stride, rx_stride, rx_count);
    return 0;
}

static void batch_tables_free(struct batch_tables *t)
{
    free(t->tx);
    free(t->rx);
    free(t->tx_iov);
    free(t->rx_iov);
}

#endif
