/* core/config.c - tr_config and the TROUPE_* environment. */
#include "core/config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/abi.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/log.h"
#include "core/status.h"

void tr__env_read(tr__env *e) {
    memset(e, 0, sizeof *e);
    const char *role = getenv("TROUPE_ROLE");
    e->role = TR__ROLE_DRIVER;
    if (role && strcmp(role, "node") == 0) e->role = TR__ROLE_NODE;
    if (role && strcmp(role, "worker") == 0) e->role = TR__ROLE_WORKER;
    e->node_path = getenv("TROUPE_NODE");
    e->actor_hex = getenv("TROUPE_ACTOR");
    e->node_config = getenv("TROUPE_NODE_CONFIG");
    const char *fd = getenv("TROUPE_READY_FD");
    e->ready_fd = fd ? atoi(fd) : -1;
    const char *sa = getenv("TROUPE_STANDALONE");
    e->standalone = sa && strcmp(sa, "1") == 0;
    e->cpus = getenv("TROUPE_CPUS");
    e->log_level = tr__log_parse_level(getenv("TROUPE_LOG_LEVEL"));
    e->command = getenv("TROUPE_COMMAND");
    e->cluster_token = getenv("TROUPE_CLUSTER_TOKEN");
    const char *owner = getenv("TROUPE_OWNER");
    e->owner_pid = owner ? atoi(owner) : 0;
}

/* ------------------------------------------------------------------ the keys, one table */

/* How a key's value is kept in tr_config, parsed, and sent to the node. */
typedef enum {
    K_STR,    /* char *: a copy, NULL when unset; a string or nil on the wire */
    K_SIZE,   /* size_t: a number in [lo, hi]; uint on the wire */
    K_INT,    /* int: a number in [lo, hi] (WHOLE: no fraction); int on the wire */
    K_DOUBLE, /* double: a number in [lo, hi]; double on the wire */
    K_BOOL,   /* int: "0" or "1"; int on the wire */
    K_ENUM,   /* int: the index of its value in names; int on the wire */
    K_RES,    /* tr__res: "NAME=AMOUNT,..." (tr__res_parse); that text on the wire */
    K_SETTER, /* no field of its own: its setter writes another key's */
} ktype;

enum {
    EMPTY_UNSETS = 1u << 0, /* K_STR: "" sets NULL */
    WHOLE = 1u << 1,        /* K_INT: a fraction is refused */
    NODE = 1u << 2,         /* goes to the node (tr__config_encode_node, _decode_node) */
    NODE_OPT = 1u << 3,     /* the node takes it absent: a number's default; a string's left */
    NODE_CHECK = 1u << 4,   /* the node refuses a number outside [lo, hi] (TR_EPROTO) */
};

typedef struct ckey {
    const char *name; /* tr_config_set's key */
    ktype type;
    size_t off;         /* offsetof(tr_config, its field) */
    double lo, hi, def; /* numbers: the bounds; the default (config_defaults) */
    unsigned flags;
    const char *wire;         /* its key in the node's config (NULL: name) */
    const char *const *names; /* K_ENUM: its values, by number; NULL-terminated */
    int (*set)(tr_config *cfg, const char *value); /* parses instead of the type's */
} ckey;

static int set_command(tr_config *cfg, const char *value);
static int set_library(tr_config *cfg, const char *value);
static int set_worker_path(tr_config *cfg, const char *value);
static int set_cluster_token(tr_config *cfg, const char *value);
static int set_token_file(tr_config *cfg, const char *path);
static int set_log_level(tr_config *cfg, const char *value);

static const char *const binding_names[] = {
    [TR__BIND_CORES] = "cores", [TR__BIND_NONE] = "none", NULL};

#define F(field) offsetof(tr_config, field)
static const ckey keys[] = {
    {"address", K_STR, F(address), .flags = EMPTY_UNSETS},
    {"namespace", K_STR, F(ns), .flags = EMPTY_UNSETS},
    {"tmpdir", K_STR, F(tmpdir), .flags = NODE | NODE_OPT},
    {"spill_dir", K_STR, F(spill_dir), .flags = NODE | NODE_OPT},
    {"worker_command", K_STR, F(worker_command), .set = set_command},
    {"worker_library", K_SETTER, .set = set_library},
    {"worker_path", K_STR, F(worker_path), .flags = NODE | NODE_OPT, .set = set_worker_path},
    {"cluster_port", K_INT, F(cluster_port), .lo = -1, .hi = 65535, .def = -1,
     .flags = WHOLE | NODE | NODE_OPT | NODE_CHECK}, /* -1: none; 0: any */
    {"cluster_client", K_BOOL, F(cluster_client), .flags = NODE | NODE_OPT},
    {"cluster_bind", K_STR, F(cluster_bind), .flags = NODE | NODE_OPT},
    {"cluster_head", K_STR, F(cluster_head), .flags = NODE | NODE_OPT},
    {"cluster_token", K_STR, F(cluster_token), .flags = NODE | NODE_OPT, .set = set_cluster_token},
    {"cluster_token_file", K_SETTER, .set = set_token_file},
    {"cluster_tls_cert", K_STR, F(cluster_tls_cert), .flags = NODE | NODE_OPT},
    {"cluster_tls_key", K_STR, F(cluster_tls_key), .flags = NODE | NODE_OPT},
    {"cluster_tls_ca", K_STR, F(cluster_tls_ca), .flags = NODE | NODE_OPT},
    {"call_spin_us", K_INT, F(call_spin_us), .lo = 0, .hi = 10000, .def = TR__CALL_SPIN_US,
     .flags = WHOLE | NODE | NODE_OPT | NODE_CHECK, .wire = "spin_us"},
    {"call_rings", K_BOOL, F(call_rings), .lo = 0, .hi = 1, .def = 1},
    {"cpu_binding", K_ENUM, F(cpu_binding), .lo = 0, .hi = 1, .def = TR__BIND_CORES,
     .flags = NODE | NODE_OPT | NODE_CHECK, .names = binding_names},
    {"metrics_port", K_INT, F(metrics_port), .lo = -1, .hi = 65535, .def = 0,
     .flags = WHOLE | NODE | NODE_OPT | NODE_CHECK}, /* -1: none; 0: any */
    {"metrics_host", K_STR, F(metrics_host), .flags = NODE | NODE_OPT},
    {"num_cpus", K_DOUBLE, F(num_cpus), .lo = 0, .hi = 1e6, .def = -1, .flags = NODE},
    {"num_gpus", K_DOUBLE, F(num_gpus), .lo = 0, .hi = 1e6, .def = -1, .flags = NODE},
    {"memory", K_DOUBLE, F(memory), .lo = 0, .hi = 1e18, .def = -1, .flags = NODE | NODE_OPT},
    {"resources", K_RES, F(resources), .flags = NODE},
    {"log_level", K_INT, F(log_level), .def = -1, .flags = NODE, .set = set_log_level},
    {"max_message_bytes", K_SIZE, F(max_msg), .lo = 4096, .hi = 4294967295.0,
     .def = TR__DEFAULT_MAX_MSG, .flags = NODE, .wire = "max_msg"},
    {"object_store_bytes", K_SIZE, F(store_bytes), .lo = 1 << 20, .hi = 1ull << 42, .flags = NODE,
     .wire = "store_bytes"}, /* 0: tr__config_store_bytes's */
    {"worker_start_timeout_ms", K_INT, F(worker_start_timeout_ms), .lo = 1, .hi = 3600e3,
     .def = 30000, .flags = NODE, .wire = "start_ms"},
};
#undef F
#define N_KEYS (sizeof keys / sizeof keys[0])

static void *field(tr_config *cfg, const ckey *k) {
    return (char *)cfg + k->off;
}

static const ckey *find_key(const char *name) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

static void config_defaults(tr_config *c) {
    memset(c, 0, sizeof *c);
    for (const ckey *k = keys; k < keys + N_KEYS; k++) {
        void *f = field(c, k);
        if (k->type == K_SIZE)
            *(size_t *)f = (size_t)k->def;
        else if (k->type == K_INT || k->type == K_BOOL || k->type == K_ENUM)
            *(int *)f = (int)k->def;
        else if (k->type == K_DOUBLE)
            *(double *)f = k->def;
    }
}

int tr__config_create(tr_config **out) {
    if (!out) return tr__err(TR_EINVAL, "tr_config_create: out is NULL");
    *out = NULL;
    tr_config *c = malloc(sizeof *c);
    if (!c) return tr__err(TR_ENOMEM, "tr_config_create");
    config_defaults(c);
    *out = c;
    return 0;
}

void tr__config_destroy(tr_config *cfg) {
    if (!cfg) return;
    for (const ckey *k = keys; k < keys + N_KEYS; k++)
        if (k->type == K_STR) free(*(char **)field(cfg, k));
    for (size_t i = 0; i < cfg->n_classes; i++)
        free((char *)cfg->classes[i].name);
    free(cfg->classes);
    for (size_t i = 0; i < cfg->n_functions; i++)
        free(cfg->functions[i].name);
    free(cfg->functions);
    free(cfg);
}

static int parse_num(const char *key, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || errno || !(d >= lo && d <= hi))
        return tr__err(TR_EINVAL, "config '%s': '%s' is not a number in [%g, %g]", key, v, lo, hi);
    *out = d;
    return 0;
}

static int set_str(char **slot, const char *v) {
    char *s = strdup(v);
    if (!s) return tr__err(TR_ENOMEM, "config string");
    free(*slot);
    *slot = s;
    return 0;
}

/* An executable's absolute path into out: name as given when it has a '/', else the first
 * on PATH. Returns 0 or -1 (errno). */
static int find_exe(const char *name, char *out) {
    if (strchr(name, '/')) {
        if (!realpath(name, out)) return -1;
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        char cand[PATH_MAX];
        if (n > 0 &&
            (size_t)snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, name) < sizeof cand &&
            access(cand, X_OK) == 0 && realpath(cand, out))
            return 0;
        p += n + (p[n] == ':');
    }
    errno = ENOENT;
    return -1;
}

/* "worker_command": words separated by spaces or tabs (no quoting), argv[0] an executable
 * (a path, or a name on PATH). */
static int set_command(tr_config *cfg, const char *value) {
    if (value[0] == '\0') { /* back to this executable */
        free(cfg->worker_command);
        cfg->worker_command = NULL;
        return 0;
    }
    char copy[4096], exe[PATH_MAX], joined[4096 + PATH_MAX];
    if (strlen(value) >= sizeof copy)
        return tr__err(TR_EINVAL, "config 'worker_command': longer than %zu bytes",
                       sizeof copy - 1);
    snprintf(copy, sizeof copy, "%s", value);
    char *words[TR__MAX_ARGS + 1], *save = NULL;
    int n = 0;
    for (char *w = strtok_r(copy, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
        if (n == TR__MAX_ARGS)
            return tr__err(TR_EINVAL, "config 'worker_command': more than %d words", TR__MAX_ARGS);
        if (strchr(w, TR__ARG_SEP))
            return tr__err(TR_EINVAL, "config 'worker_command': a control character in '%s'", w);
        words[n++] = w;
    }
    if (n == 0) return tr__err(TR_EINVAL, "config 'worker_command': no command");
    if (find_exe(words[0], exe) != 0)
        return tr__err(TR_EINVAL, "config 'worker_command': '%s' is not an executable (%s)",
                       words[0], strerror(errno));
    size_t k = (size_t)snprintf(joined, sizeof joined, "%s", exe);
    for (int i = 1; i < n && k < sizeof joined; i++)
        k += (size_t)snprintf(joined + k, sizeof joined - k, "%c%s", TR__ARG_SEP, words[i]);
    if (k >= sizeof joined) return tr__err(TR_EINVAL, "config 'worker_command': too long");
    return set_str(&cfg->worker_command, joined);
}

int tr__config_find_worker(char out[PATH_MAX]) {
    char *worker = out;
    worker[0] = '\0';
    Dl_info info;
    char self[PATH_MAX];
    if (dladdr((void *)tr__config_set, &info) && info.dli_fname && realpath(info.dli_fname, self)) {
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        /* installed (bin/ beside lib/), or the build tree (bazel-bin/api/cmd/) */
        const char *tries[] = {"%s/troupe-worker", "%s/../bin/troupe-worker",
                               "%s/cmd/troupe-worker"};
        for (size_t i = 0; i < sizeof tries / sizeof tries[0] && !worker[0]; i++) {
            char cand[PATH_MAX + 32];
            snprintf(cand, sizeof cand, tries[i], self);
            if (find_exe(cand, worker) != 0) worker[0] = '\0';
        }
    }
    if (!worker[0] && find_exe("troupe-worker", worker) != 0) {
        worker[0] = '\0';
        return tr__err(TR_ENOTFOUND, "no troupe-worker next to libtroupe or on PATH");
    }
    return 0;
}

/* "worker_library": workers run troupe-worker LIB, found next to this library (DIR/ or
 * DIR/../bin/) or on PATH. */
static int set_library(tr_config *cfg, const char *value) {
    char lib[PATH_MAX], worker[PATH_MAX] = "", cmd[2 * PATH_MAX + 2];
    if (!realpath(value, lib))
        return tr__err(TR_EINVAL, "config 'worker_library': %s: %s", value, strerror(errno));
    if (tr__config_find_worker(worker) != 0)
        return tr__err(TR_EINVAL,
                       "config 'worker_library': no troupe-worker next to libtroupe or on PATH "
                       "(set worker_command to 'PATH/troupe-worker %s' instead)",
                       lib);
    snprintf(cmd, sizeof cmd, "%s%c%s", worker, TR__ARG_SEP, lib);
    return set_str(&cfg->worker_command, cmd);
}

/* "worker_path": entries separated by ':', each an existing program or directory (kept as
 * its real path; a directory's with a trailing '/'). */
static int set_worker_path(tr_config *cfg, const char *value) {
    tr__buf b = TR__BUF_INIT;
    int rc = 0;
    for (const char *p = value; *p && !rc;) {
        size_t n = strcspn(p, ":");
        char entry[PATH_MAX], real[PATH_MAX];
        struct stat st;
        if (n == 0 || n >= sizeof entry) {
            p += n + (p[n] == ':');
            continue;
        }
        memcpy(entry, p, n);
        entry[n] = '\0';
        if (!realpath(entry, real) || stat(real, &st) != 0)
            rc = tr__err(TR_EINVAL, "config 'worker_path': %s: %s", entry, strerror(errno));
        else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            rc = tr__err(TR_EINVAL, "config 'worker_path': %s is no program or directory", entry);
        else if (strchr(real, ':'))
            rc = tr__err(TR_EINVAL, "config 'worker_path': %s has a ':' in its path", real);
        else {
            if (b.len) tr__buf_append(&b, ":", 1);
            tr__buf_append(&b, real, strlen(real));
            if (S_ISDIR(st.st_mode) && strcmp(real, "/") != 0) tr__buf_append(&b, "/", 1);
        }
        p += n + (p[n] == ':');
    }
    tr__buf_append(&b, "", 1);
    if (!rc && b.oom) rc = tr__err(TR_ENOMEM, "config 'worker_path'");
    if (!rc) {
        free(cfg->worker_path);
        cfg->worker_path = b.len > 1 ? strdup((const char *)b.data) : NULL;
        if (b.len > 1 && !cfg->worker_path) rc = tr__err(TR_ENOMEM, "config 'worker_path'");
    }
    tr__buf_free(&b);
    return rc;
}

/* "cluster_token": 1..255 printable ASCII bytes, no spaces (it travels in an HTTP/2 header
 * and in files a line each). */
static int set_token(tr_config *cfg, const char *value, const char *from) {
    size_t n = strlen(value);
    if (n == 0 || n > 255)
        return tr__err(TR_EINVAL, "%s: a cluster token of %zu bytes (want 1..255)", from, n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)value[i] <= 0x20 || (unsigned char)value[i] >= 0x7f)
            return tr__err(TR_EINVAL,
                           "%s: a cluster token is printable ASCII without spaces (byte %zu is "
                           "not)",
                           from, i);
    return set_str(&cfg->cluster_token, value);
}

/* "cluster_token_file": the token is the file's first line (read now: a token never has
 * to appear on a command line, where every user can read it in /proc). */
static int set_token_file(tr_config *cfg, const char *path) {
    FILE *f = fopen(path, "re");
    if (!f) return tr__err_errno(errno, "config 'cluster_token_file': %s", path);
    char line[300] = "";
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!got || !line[0])
        return tr__err(TR_EINVAL, "config 'cluster_token_file': %s has no token on its first line",
                       path);
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "config 'cluster_token_file' %s", path);
    return set_token(cfg, line, what);
}

int tr__config_env_token(tr_config *cfg, const tr__env *env) {
    if (cfg->cluster_token || !env->cluster_token) return 0;
    return set_token(cfg, env->cluster_token, "TROUPE_CLUSTER_TOKEN");
}

static int set_cluster_token(tr_config *cfg, const char *value) {
    return set_token(cfg, value, "cluster_token");
}

static int set_log_level(tr_config *cfg, const char *value) {
    int l = tr__log_parse_level(value);
    if (l < 0)
        return tr__err(TR_EINVAL, "config 'log_level': '%s' is not error|warn|info|debug", value);
    cfg->log_level = l;
    return 0;
}

/* "'a' or 'b'", "'a', 'b' or 'c'": an enum's values, for its message. */
static void list_names(const char *const *names, char *out, size_t cap) {
    size_t n = 0, k = 0;
    while (names[n])
        n++;
    out[0] = '\0';
    for (size_t i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s'%s'",
                              i == 0      ? ""
                              : i + 1 < n ? ", "
                                          : " or ",
                              names[i]);
}

/* value, parsed as k's type says (or by its setter), into cfg; nothing changes on error. */
static int set_key(tr_config *cfg, const ckey *k, const char *value) {
    if (k->set) return k->set(cfg, value);
    void *f = field(cfg, k);
    double d = 0;
    int rc;
    switch (k->type) {
    case K_STR:
        if (*value == '\0' && (k->flags & EMPTY_UNSETS)) {
            free(*(char **)f);
            *(char **)f = NULL;
            return 0;
        }
        return set_str(f, value);
    case K_SIZE:
    case K_INT:
    case K_DOUBLE:
        if ((rc = parse_num(k->name, value, k->lo, k->hi, &d))) return rc;
        if ((k->flags & WHOLE) && d != (int)d)
            return tr__err(TR_EINVAL, "config '%s': '%s' is not whole", k->name, value);
        if (k->type == K_SIZE)
            *(size_t *)f = (size_t)d;
        else if (k->type == K_INT)
            *(int *)f = (int)d;
        else
            *(double *)f = d;
        return 0;
    case K_BOOL:
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
            return tr__err(TR_EINVAL, "config '%s': '%s' (want 0 or 1)", k->name, value);
        *(int *)f = value[0] == '1';
        return 0;
    case K_ENUM:
        for (int i = 0; k->names[i]; i++) {
            if (strcmp(value, k->names[i]) == 0) {
                *(int *)f = i;
                return 0;
            }
        }
        char list[200];
        list_names(k->names, list, sizeof list);
        return tr__err(TR_EINVAL, "config: %s is %s, not '%s'", k->name, list, value);
    case K_RES: {
        tr__res r = {0}; /* (not half-applied) */
        if ((rc = tr__res_parse(&r, value))) return rc;
        *(tr__res *)f = r;
        return 0;
    }
    case K_SETTER:
        break;
    }
    return tr__err(TR_EINTERNAL, "config '%s': no way to set it", k->name);
}

int tr__config_set(tr_config *cfg, const char *key, const char *value) {
    if (!cfg || !key || !value) return tr__err(TR_EINVAL, "tr_config_set: NULL argument");
    const ckey *k = find_key(key);
    if (!k) return tr__err(TR_EINVAL, "config: unknown key '%s'", key);
    return set_key(cfg, k, value);
}

void tr__actor_class_init(tr_actor_class *cls) {
    if (!cls) return;
    memset(cls, 0, sizeof *cls);
    cls->struct_size = sizeof *cls;
}

const tr_actor_class *tr__config_find_class(const tr_config *cfg, const char *name) {
    for (size_t i = 0; i < cfg->n_classes; i++)
        if (strcmp(cfg->classes[i].name, name) == 0) return &cfg->classes[i];
    return NULL;
}

int tr__config_add_class(tr_config *cfg, const tr_actor_class *given) {
    if (!cfg || !given) return tr__err(TR_EINVAL, "tr_config_add_class: NULL argument");
    tr_actor_class c, *cls = &c;
    tr__actor_class_init(cls);
    int rc = tr__struct_in(cls, sizeof *cls, given, TR__SIZE_UPTO(tr_actor_class, n_methods),
                           "tr_config_add_class");
    if (rc) return rc;
    if (!cls->name || !*cls->name || strlen(cls->name) > 255)
        return tr__err(TR_EINVAL, "tr_config_add_class: class needs a name of 1..255 bytes");
    if (cls->n_methods && !cls->methods)
        return tr__err(TR_EINVAL, "class '%s': n_methods without methods", cls->name);
    for (size_t i = 0; i < cls->n_methods; i++)
        if (!cls->methods[i].name || !cls->methods[i].fn)
            return tr__err(TR_EINVAL, "class '%s': method %zu has no name or function", cls->name,
                           i);
    if (tr__config_find_class(cfg, cls->name))
        return tr__err(TR_EEXIST, "class '%s' is already registered", cls->name);
    tr_actor_class *v = realloc(cfg->classes, (cfg->n_classes + 1) * sizeof *v);
    if (!v) return tr__err(TR_ENOMEM, "tr_config_add_class");
    cfg->classes = v;
    char *name = strdup(cls->name);
    if (!name) return tr__err(TR_ENOMEM, "tr_config_add_class");
    v[cfg->n_classes] = *cls;
    v[cfg->n_classes].name = name;
    cfg->n_classes++;
    return 0;
}

tr_task_fn tr__config_find_function(const tr_config *cfg, const char *name, size_t n) {
    for (size_t i = 0; i < cfg->n_functions; i++)
        if (strlen(cfg->functions[i].name) == n && memcmp(cfg->functions[i].name, name, n) == 0)
            return cfg->functions[i].fn;
    return cfg->function_dispatch;
}

int tr__config_add_function(tr_config *cfg, const char *name, tr_task_fn fn) {
    if (!cfg || !fn) return tr__err(TR_EINVAL, "tr_config_add_function: NULL argument");
    if (!name) { /* the binding's: any name not registered */
        if (cfg->function_dispatch)
            return tr__err(TR_EEXIST, "tr_config_add_function: a dispatch is registered already");
        cfg->function_dispatch = fn;
        return 0;
    }
    size_t n = strlen(name);
    if (n == 0 || n > 255)
        return tr__err(TR_EINVAL, "tr_config_add_function: a function needs a name of 1..255 "
                                  "bytes");
    for (size_t i = 0; i < cfg->n_functions; i++)
        if (strcmp(cfg->functions[i].name, name) == 0)
            return tr__err(TR_EEXIST, "function '%s' is already registered", name);
    struct tr__function *v = realloc(cfg->functions, (cfg->n_functions + 1) * sizeof *v);
    if (!v) return tr__err(TR_ENOMEM, "tr_config_add_function");
    cfg->functions = v;
    if (!(v[cfg->n_functions].name = strdup(name)))
        return tr__err(TR_ENOMEM, "tr_config_add_function");
    v[cfg->n_functions++].fn = fn;
    return 0;
}

int tr__config_copy(const tr_config *src, tr_config **out) {
    tr_config *c;
    int rc = tr__config_create(&c);
    if (rc) return rc;
    if (src) {
        *c = *src; /* numbers, resources; strings and classes copied below */
        c->classes = NULL;
        c->n_classes = 0;
        c->functions = NULL;
        c->n_functions = 0;
        for (const ckey *k = keys; k < keys + N_KEYS; k++)
            if (k->type == K_STR) *(char **)field(c, k) = NULL;
        for (const ckey *k = keys; k < keys + N_KEYS; k++) {
            const char *s = k->type == K_STR ? *(char **)field((tr_config *)src, k) : NULL;
            if (s && set_str(field(c, k), s)) goto oom;
        }
        for (size_t i = 0; i < src->n_classes; i++)
            if (tr__config_add_class(c, &src->classes[i])) goto oom;
        for (size_t i = 0; i < src->n_functions; i++)
            if (tr__config_add_function(c, src->functions[i].name, src->functions[i].fn)) goto oom;
    }
    *out = c;
    return 0;
oom:
    tr__config_destroy(c);
    return tr__err(TR_ENOMEM, "copying the configuration");
}

static pthread_mutex_t command_mu = PTHREAD_MUTEX_INITIALIZER;
static char *command_noted;

void tr__command_note(const tr_config *cfg) {
    char *c = cfg && cfg->worker_command ? strdup(cfg->worker_command) : NULL;
    pthread_mutex_lock(&command_mu);
    free(command_noted);
    command_noted = c;
    pthread_mutex_unlock(&command_mu);
}

int tr__command_self(char *out, size_t cap) {
    int rc = 0;
    pthread_mutex_lock(&command_mu);
    const char *role = getenv("TROUPE_ROLE"); /* (a worker's own: not a driver's it spawned) */
    const char *c = command_noted                         ? command_noted
                    : role && strcmp(role, "worker") == 0 ? getenv("TROUPE_COMMAND")
                                                          : NULL;
    if (c && *c) {
        if (strlen(c) >= cap)
            rc = tr__err(TR_EINVAL, "the worker command is too long");
        else
            memcpy(out, c, strlen(c) + 1);
    } else {
        ssize_t n = readlink("/proc/self/exe", out, cap - 1);
        if (n < 0)
            rc = tr__err_errno(errno, "readlink /proc/self/exe");
        else
            out[n] = '\0';
    }
    pthread_mutex_unlock(&command_mu);
    return rc;
}

int tr__command_running(char *out, size_t cap) {
    FILE *f = fopen("/proc/self/cmdline", "re");
    size_t n = f ? fread(out, 1, cap, f) : 0;
    int e = errno;
    if (f) fclose(f);
    if (n == 0) return tr__err_errno(f ? EIO : e, "reading /proc/self/cmdline");
    if (n == cap) return tr__err(TR_EINVAL, "this process's command is too long");
    while (n > 0 && out[n - 1] == '\0')
        n--;
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\0') out[i] = TR__ARG_SEP;
    out[n] = '\0';
    return 0;
}

int tr__command_split(char *cmd, char **argv) {
    int n = 0;
    for (char *p = cmd; p && *p && n < TR__MAX_ARGS;) {
        argv[n++] = p;
        p = strchr(p, TR__ARG_SEP);
        if (p) *p++ = '\0';
    }
    argv[n] = NULL;
    return n;
}

int tr__config_log_level(const tr_config *cfg, const tr__env *env) {
    if (cfg && cfg->log_level >= 0) return cfg->log_level;
    if (env && env->log_level >= 0) return env->log_level;
    return TR__LOG_WARN;
}

size_t tr__config_store_bytes(const tr_config *cfg) {
    if (cfg && cfg->store_bytes) return cfg->store_bytes;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)4 << 30;
    size_t want = ram / 10 * 3;
    return want > ((size_t)1 << 30) ? (size_t)1 << 30 : want;
}

/* The node's part of cfg: each NODE key under its wire name. */
int tr__config_encode_node(const tr_config *cfg, tr__buf *out) {
    size_t m = tr__enc_map_open(out);
    for (const ckey *k = keys; k < keys + N_KEYS; k++) {
        if (!(k->flags & NODE)) continue;
        const void *f = field((tr_config *)cfg, k);
        tr__enc_str(out, k->wire ? k->wire : k->name);
        switch (k->type) {
        case K_STR:
            tr__enc_str(out, *(char *const *)f); /* nil when unset */
            break;
        case K_SIZE:
            tr__enc_uint(out, *(const size_t *)f);
            break;
        case K_INT:
        case K_BOOL:
        case K_ENUM:
            tr__enc_int(out, *(const int *)f);
            break;
        case K_DOUBLE:
            tr__enc_double(out, *(const double *)f);
            break;
        case K_RES: {
            char res[1024];
            tr__res_format(f, res, sizeof res);
            tr__enc_str(out, res);
            break;
        }
        case K_SETTER:
            tr__enc_nil(out);
            break;
        }
    }
    tr__enc_map_close(out, m);
    return out->oom ? TR_ENOMEM : 0;
}

/* An optional path: a string replaces *out; nil or absent leaves it. */
static int decode_path(const tr__obj *map, const char *key, char **out) {
    if (tr__obj_type(tr__obj_get(map, key)) != TR__T_STR) return 0;
    free(*out);
    *out = NULL;
    return tr__get_strdup(map, key, out);
}

/* One NODE key from the node's config into cfg: a number NODE_OPT leaves out is its
 * default; the rest must be there, of their type. */
static int decode_key(const tr__obj *map, const ckey *k, tr_config *cfg) {
    const char *w = k->wire ? k->wire : k->name;
    void *f = field(cfg, k);
    int64_t i = (int64_t)k->def;
    uint64_t u;
    int rc;
    switch (k->type) {
    case K_STR:
        return decode_path(map, w, f);
    case K_SIZE:
        if ((rc = tr__get_uint(map, w, &u))) return rc;
        *(size_t *)f = (size_t)u;
        return 0;
    case K_DOUBLE:
        if ((k->flags & NODE_OPT) && !tr__obj_get(map, w)) {
            *(double *)f = k->def;
            return 0;
        }
        return tr__get_double(map, w, f);
    case K_INT:
    case K_BOOL:
    case K_ENUM:
        if ((!(k->flags & NODE_OPT) || tr__obj_get(map, w)) && (rc = tr__get_int(map, w, &i)))
            return rc;
        if ((k->flags & NODE_CHECK) && (i < k->lo || i > k->hi))
            return tr__err(TR_EPROTO, "node config: %s %lld", w, (long long)i);
        *(int *)f = k->type == K_BOOL ? i != 0 : (int)i;
        return 0;
    case K_RES: {
        char *res = NULL;
        if ((rc = tr__get_strdup(map, w, &res))) return rc;
        memset(f, 0, sizeof(tr__res));
        rc = tr__res_parse(f, res);
        free(res);
        return rc;
    }
    case K_SETTER:
        break;
    }
    return 0;
}

int tr__config_decode_node(const void *data, size_t len, tr_config *cfg) {
    tr__dec d;
    int rc = tr__dec_init(&d, data, len);
    for (const ckey *k = keys; !rc && k < keys + N_KEYS; k++)
        if (k->flags & NODE) rc = decode_key(d.root, k, cfg);
    tr__dec_free(&d);
    return rc;
}
