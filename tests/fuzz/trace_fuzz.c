/* tests/fuzz/trace_fuzz.c - fuzz target: what a cluster head's CLI does with another node's
 * trace bundle (GET /api/v1/rings: core/trace.h tr__trace_unbundle), then what the
 * flight recorder's and the timeline's readers make of the files it wrote; and what
 * `troupe list --session` makes of an event log's bytes (core/events.h). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/events.h"
#include "core/trace.h"

static char dir[64];

static void clear(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') unlinkat(dirfd(d), e->d_name, 0);
    if (d) closedir(d);
}

static void remove_dir(void) {
    clear();
    rmdir(dir);
}

static void on_event(void *ctx, const tr__evlog_rec *e) {
    size_t *n = ctx;
    *n += strlen(tr__evlog_get(e, "event")) + strlen(tr__evlog_get(e, "id"));
}

static void on_group(void *ctx, const tr__flight_group_view *g) {
    size_t *n = ctx;
    *n += strlen(g->name) + strlen(g->backend) + strlen(g->verdict);
    for (int i = 0; i < g->n_ranks; i++)
        *n += (size_t)g->ranks[i].rank + g->ranks[i].last_op;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/trace-fuzz-%d", (int)getpid());
        atexit(remove_dir);
    }
    tr__trace_unbundle(data, size, dir, "fuzz:1");
    tr__buf text = TR__BUF_INIT, json = TR__BUF_INIT, tl = TR__BUF_INIT;
    tr__flight_verdicts(dir, NULL, &text, &json);
    size_t seen = 0;
    tr__flight_each(dir, on_group, &seen); /* (the groups list's reader) */
    tr__trace_timeline(dir, &tl);
    tr__buf_free(&text);
    tr__buf_free(&json);
    tr__buf_free(&tl);
    clear();
    char log[128];
    snprintf(log, sizeof log, "%s/events.log", dir);
    FILE *f = fopen(log, "w");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
        size_t n = 0;
        tr__evlog_read(log, on_event, &n);
        unlink(log);
    }
    return 0;
}
