/* api/node/membership.c - see membership.h. */
#include "api/node/membership.h"

#include <stdio.h>
#include <string.h>

#include "core/events.h"
#include "core/log.h"
#include "core/status.h"

static int64_t ms_between(int64_t from_ns, int64_t now) {
    return (now - from_ns) / 1000000;
}

void tr__members_init(tr__members *t, const tr__member *self, int64_t now) {
    memset(t, 0, sizeof *t);
    t->nodes[0] = *self;
    t->nodes[0].alive = 1;
    t->nodes[0].last_ns = now;
    t->nodes[0].num = 1;
    t->n = 1;
    t->next_num = 2;
}

static int find(const tr__members *t, const char *id) {
    int i = 1;
    while (i < t->n && strcmp(t->nodes[i].id, id) != 0)
        i++;
    return i;
}

int tr__members_join(tr__members *t, tr__member *m, int64_t want, int64_t now) {
    int i = find(t, m->id);
    if (i == t->n && t->n == TR__MEMBERS_MAX)
        return tr__err(TR_ERESOURCES, "cluster: %d nodes already", TR__MEMBERS_MAX);
    /* its number: the one it had (here, or - the head restarted - as it says, if no other
     * node has it), else a new one */
    if (i < t->n) want = t->nodes[i].num;
    for (int k = 0; k < t->n && want > 0; k++)
        if (k != i && t->nodes[k].num == (uint32_t)want) want = 0;
    if (want <= 1 || want > TR__MEMBER_NUM_MAX) {
        for (;;) {
            want = t->next_num++;
            if (t->next_num > TR__MEMBER_NUM_MAX) t->next_num = 2;
            int used = 0;
            for (int k = 0; k < t->n; k++)
                used |= t->nodes[k].num == (uint32_t)want;
            if (!used) break;
        }
    }
    m->num = (uint32_t)want;
    m->last_ns = now;
    m->alive = 1;
    tr__evlog("node_joined", "id", m->id, "address", m->address, NULL); /* (core/events.h) */
    if (i == t->n) t->n++;
    t->nodes[i] = *m;
    return i;
}

int tr__members_beat(tr__members *t, const char *id, int64_t now, int *back) {
    int i = find(t, id);
    if (i >= t->n)
        return tr__err(TR_ENOTFOUND, "cluster: node %s is not known here: register again", id);
    *back = !t->nodes[i].alive;
    if (*back) tr__evlog("node_joined", "id", t->nodes[i].id, "address", t->nodes[i].address, NULL);
    t->nodes[i].last_ns = now;
    t->nodes[i].alive = 1;
    return i;
}

void tr__members_sweep(tr__members *t, int64_t now, void (*on_lost)(void *arg, const tr__member *m),
                       void *arg) {
    for (int i = 1; i < t->n; i++) {
        tr__member *m = &t->nodes[i];
        int64_t silent = ms_between(m->last_ns, now);
        if (m->alive && silent >= TR__MEMBER_LOST_MS) {
            m->alive = 0;
            TR_LOG_ERROR("CLUSTER-LOST", "node %s at %s is lost: no heartbeat for %lld ms", m->id,
                         m->address, (long long)silent);
            tr__evlog("node_lost", "id", m->id, "address", m->address, "reason", "no heartbeat",
                      NULL);
            if (on_lost) on_lost(arg, m);
        }
        if (!m->alive && silent >= TR__MEMBER_FORGET_MS) { /* gone for good: forgotten */
            TR_LOG_INFO("CLUSTER-FORGET", "node %s at %s leaves the table", m->id, m->address);
            t->nodes[i--] = t->nodes[--t->n];
        }
    }
}

int tr__members_says(const tr__members *t, const char *address) {
    int says = -1;
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->nodes[i].address, address) == 0) says = t->nodes[i].alive != 0;
    return says;
}

void tr__members_json(const tr__members *t, int64_t now, tr__buf *j) {
    tr__buf_append(j, "[", 1);
    for (int i = 0; i < t->n; i++) {
        const tr__member *m = &t->nodes[i];
        char e[1200];
        int k = snprintf(e, sizeof e,
                         "%s{\"id\":\"%s\",\"address\":\"%s\",\"num\":%u,\"head\":%s,"
                         "\"client\":%s,\"cpus\":%g,"
                         "\"gpus\":%d,\"resources\":\"%s\",\"alive\":%s,\"last_seen_ms\":%lld,"
                         "\"actors\":%llu,\"objects\":%llu,\"object_bytes\":%llu,"
                         "\"metrics\":\"%s\"}",
                         i ? "," : "", m->id, m->address, m->num, i == 0 ? "true" : "false",
                         m->client ? "true" : "false", m->cpus, m->gpus, m->resources,
                         m->alive ? "true" : "false",
                         (long long)(i == 0 ? 0 : ms_between(m->last_ns, now)),
                         (unsigned long long)m->actors, (unsigned long long)m->objects,
                         (unsigned long long)m->object_bytes, m->metrics);
        tr__buf_append(j, e, (size_t)(k < (int)sizeof e ? k : (int)sizeof e - 1));
    }
    tr__buf_append(j, "]", 1);
}
