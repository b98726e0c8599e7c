/*
 * worker.h -- what every native worker (hosts/<protocol>/native/worker.c) keeps alike besides
 * its sockets (mmsg.h): the table of its structs' fields that Python's layout check reads
 * (hosts/native/__init__.py, layout_differences), and the send timeline (hosts/stats.py's
 * SendTimeline) that C grows and Python reads after the job.
 */
#ifndef HOSTS_NATIVE_WORKER_H
#define HOSTS_NATIVE_WORKER_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One field of a struct Python mirrors, by "struct.field" (two swapped fields of one size keep
 * the struct's size: only the offsets tell). */
struct field {
    const char *name;
    size_t offset;
};
#define FIELD(type, name) {#type "." #name, offsetof(struct type, name)}

/* The offset of ``name`` among ``count`` fields, -1 for a name the table lacks. */
static int64_t field_offset(const struct field *fields, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(fields[i].name, name) == 0)
            return (int64_t)fields[i].offset;
    return -1;
}

/* SendTimeline.record: ``count`` packets sent at ``now`` into bin (now - t0) / bin_s of the
 * C-owned ``*bins`` (``*len`` used, ``*capacity`` allocated), grown as needed. 0, or -1 out of memory. */
static int timeline_add(int64_t **bins, int64_t *len, int64_t *capacity, double t0, double bin_s, double now, int64_t count)
{
    int64_t index = (int64_t)((now - t0) / bin_s);
    if (index < 0)
        index = 0;
    if (index >= *capacity) {
        int64_t grown_capacity = *capacity ? *capacity : 1024;
        while (grown_capacity <= index)
            grown_capacity *= 2;
        int64_t *grown = realloc(*bins, (size_t)grown_capacity * sizeof *grown);
        if (!grown)
            return -1;
        memset(grown + *capacity, 0, (size_t)(grown_capacity - *capacity) * sizeof *grown);
        *bins = grown;
        *capacity = grown_capacity;
    }
    if (index >= *len)
        *len = index + 1;
    (*bins)[index] += count;
    return 0;
}

#endif
