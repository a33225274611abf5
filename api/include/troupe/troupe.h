/* troupe/troupe.h - the public C API of troupe: configuration, the runtime, actor classes,
 * actors, method calls and their results.
 *
 * Conventions (docs/STYLE.md): every fallible call returns 0 or a negative TR_E* code and
 * leaves a message for tr_last_error(); opaque handles (tr_runtime, tr_config) live in
 * this process, value ids (tr_actor_id, tr_ref) name things that live elsewhere, and a
 * stale id gives an error, never a crash. Each declaration says its thread safety.
 *
 * Processes. The program that calls tr_init is the driver. Actors run in worker processes
 * that execute this same executable (unless the config key "worker_command" or
 * "worker_library" names another): a worker runs the program's main() up to tr_init (or
 * tr_worker_main), which in a worker never returns. So build the tr_config with the actor
 * classes and call tr_init before doing anything else in main().
 */
#ifndef TROUPE_TROUPE_H
#define TROUPE_TROUPE_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* No deadline; accepted wherever a timeout in milliseconds is taken. The waits that need
 * a bound treat it as one hour: a group join (tr_group_join, tr_group_open) and each gloo
 * op. Everything else - tr_get, tr_wait, shm ops, object seals - waits for as long as
 * it takes. */
#define TR_FOREVER (-1)

/* Option and result structs start with uint32_t struct_size, set by their _INIT macro or
 * _init function to the size the caller was compiled with, TR_STRUCT_MAGIC in its high
 * 16 bits (TR_STRUCT_SIZE): a struct nobody initialised is refused (TR_EINVAL), never
 * read past its end. The library accepts any size from a struct's first published version
 * up: fields a caller's older version lacks take their defaults, fields of a newer
 * version the library does not know are ignored; result structs are filled up to the
 * caller's size. So fields are only ever added at the end, and a compiled binding keeps
 * working across versions (a binary built before 0.3, whose struct_size has no magic, is
 * accepted at exactly a size troupe published then). */
#define TR_STRUCT_MAGIC 0x54520000u /* "TR" */
#define TR_STRUCT_SIZE(type) ((uint32_t)sizeof(type) | TR_STRUCT_MAGIC)

typedef struct tr_config tr_config;
typedef struct tr_group tr_group;
typedef struct tr_runtime tr_runtime;
typedef struct tr_ctx tr_ctx;

/* An actor, by value: valid across processes; a stale id gives TR_ENOTFOUND. */
typedef struct tr_actor_id {
    uint8_t b[16];
} tr_actor_id;

/* A reference to a value: an object (tr_put) or what a call will produce. Its maker owns
 * it; it is valid there until tr_ref_release (after that any use gives TR_ESTALE). Passed
 * to another process - in tr_put_refs, tr_call_contains or tr_ctx_reply_contains, which
 * keep it alive in flight - it may be tr_get there and passed on; tr_ref_borrow makes that
 * process a holder of its own (docs/OWNERSHIP.md). */
typedef struct tr_ref {
    uint8_t b[16];
} tr_ref;

/* ------------------------------------------------------------------ actor classes */

/* Constructor: gets the creation arguments and sets *self to the instance. Returns 0, or
 * non-zero to fail creation (the actor then dies with the message of tr_ctx_error). */
typedef int (*tr_ctor_fn)(tr_ctx *ctx, const void *args, size_t len, void **self);
/* Destructor: called when the worker exits in an orderly way. May be NULL. */
typedef void (*tr_dtor_fn)(void *self);
/* Method: gets its arguments (by convention msgpack, to troupe opaque bytes) and writes
 * its result with tr_ctx_reply. Returns 0, or non-zero for an error that reaches the
 * caller as TR_ETASK with the text of tr_ctx_error; the actor lives on. */
typedef int (*tr_method_fn)(tr_ctx *ctx, void *self, const void *args, size_t len);

typedef struct tr_method_def {
    const char *name;
    tr_method_fn fn;
} tr_method_def;

typedef struct tr_actor_class {
    uint32_t struct_size;         /* TR_STRUCT_SIZE(tr_actor_class) */
    const char *name;             /* unique class name */
    tr_ctor_fn ctor;              /* may be NULL: self is NULL */
    tr_dtor_fn dtor;              /* may be NULL */
    const tr_method_def *methods; /* borrowed: must outlive the runtime (usually static) */
    size_t n_methods;
    /* Added in 0.2 (struct_size tells): runs every method not in `methods`, whatever its
     * name (tr_ctx_method says which), for bindings whose classes are known only at run
     * time (a Python class). NULL: such a call gets TR_ENOMETHOD. */
    tr_method_fn dispatch;
    /* Added in 0.12: called on a thread that ran the class's methods before it waits for
     * anything - its next call (past a poll of a few microseconds), a lock, another
     * process - or leaves its loop; on a thread of a pool (max_concurrency, concurrency
     * groups) or a compiled graph's, after each method. A binding whose methods need a
     * lock of its own keeps it from one call to the next and lets it go here (Python's
     * GIL: taken anew for each call it cost ~50-110 ns of a ~1 us call). NULL: none. */
    void (*idle)(void);
} tr_actor_class;

#define TR_ACTOR_CLASS_INIT                                                                        \
    { TR_STRUCT_SIZE(tr_actor_class), NULL, NULL, NULL, NULL, 0, NULL, NULL }
/* Same as TR_ACTOR_CLASS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_actor_class_init(tr_actor_class *cls);

/* Writes the method's (or constructor's) result: data is copied. Calling it again
 * replaces the result. A result over 100 KiB travels through the node's object store
 * (one copy in, a zero-copy view for the caller) instead of the socket. In a compiled
 * graph's step whose output only the driver reads, a result that lies within the step's
 * first argument (all of it, or part) is not copied: the driver views it where it is.
 * Returns 0 or TR_ENOMEM. Thread safety: the method's thread. */
TR_API int tr_ctx_reply(tr_ctx *ctx, const void *data, size_t len);
/* As tr_ctx_reply, with no copy: *buf gets len bytes the method writes its result into
 * before it returns - in a compiled graph's step its output slot, or over a slot an
 * object of the store made for it (sealed when the method returns); in a classic call the
 * result buffer. Calling tr_ctx_reply* again replaces it (*buf is then invalid).
 * Returns 0, TR_EINVAL, TR_ENOMEM or the store's code (a full store). Thread safety: the
 * method's thread. */
TR_API int tr_ctx_reply_alloc(tr_ctx *ctx, size_t len, void **buf);
/* The method's result is len bytes of device memory at dev (the CUDA build): in a
 * classic call it is copied to the host and replied as tr_ctx_reply; in a compiled
 * graph's step it goes on as the edge's transport says (TR_DAG_NCCL, TR_DAG_CUDA_IPC:
 * device to device; shm: copied into the slot), after the method returns, so dev must
 * stay valid until then (memory the actor owns). Without CUDA: TR_EINVAL.
 * Thread safety: the method's thread. */
TR_API int tr_ctx_reply_device(tr_ctx *ctx, const void *dev, size_t len);

/* As tr_ctx_reply, for a result that contains refs (n of them, e.g. a binding's value with
 * refs inside): they stay alive with the result until the caller has read it and
 * borrowed (tr_ref_borrow) what it keeps; results of this process's own calls among them
 * are shared first (their owner stays this process). Not in a compiled graph's step
 * (TR_ESTATE). Returns 0, TR_EINVAL, TR_ENOMEM, TR_ESTALE (a ref of ours that is
 * released). Thread safety: the method's thread. */
TR_API int tr_ctx_reply_contains(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs,
                                 size_t n);

/* Replies n results at once (1..1024; data[i] is len[i] bytes, copied), for a call made
 * with num_returns = n (tr_call_multi, tr_task_submit_multi): its i-th ref gets part i.
 * Returns 0, TR_EINVAL, TR_ENOMEM, TR_ESTATE (in a compiled graph's step). Thread
 * safety: the method's thread. */
TR_API int tr_ctx_reply_multi(tr_ctx *ctx, const void *const *data, const size_t *len, size_t n);

/* As tr_ctx_reply_multi, for parts that contain refs (n_refs of them, over all parts: as
 * tr_ctx_reply_contains keeps them). Each of the caller's refs keeps them alive as long as
 * it lives (a part's ref holds all n_refs, not only its own). n_refs == 0: as
 * tr_ctx_reply_multi. Returns as tr_ctx_reply_multi and tr_ctx_reply_contains. Thread
 * safety: the method's thread. */
TR_API int tr_ctx_reply_multi_contains(tr_ctx *ctx, const void *const *data, const size_t *len,
                                       size_t n, const tr_ref *refs, size_t n_refs);

/* Sends the next item of the call's stream to its caller now, while the method runs on
 * (Ray's streaming generators): data (len bytes, copied) is the item's value. A caller
 * that made the call or task with num_returns TR_STREAMING takes the items' refs with
 * tr_stream_next as they come; what the method replies at its end (or its error) is the
 * stream ref's own value. A caller that asked for results drops the items. A large item
 * goes through the object store, as a result does; items are never lost or reordered.
 * Returns 0, TR_EINVAL, TR_EMSGSIZE (over max_message_bytes for a caller on another
 * node), TR_ENOMEM, TR_ESTATE (in a compiled graph's step). Thread safety: the method's
 * thread (or the thread it runs on, for a binding's async method). */
TR_API int tr_ctx_yield(tr_ctx *ctx, const void *data, size_t len);

/* As tr_ctx_yield, for an item that contains refs (n of them): they stay alive as long
 * as the item's ref does, as tr_ctx_reply_contains keeps a result's. */
TR_API int tr_ctx_yield_contains(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs,
                                 size_t n);

/* Whether the caller canceled the call running (tr_cancel without force, by its caller on
 * this node or another, of a task or an actor's call): 1 or 0. A long task or method polls it and
 * returns early; the caller's get says TR_ECANCELED whatever it returns. A task's worker is
 * also sent SIGURG (ignored unless handled: a binding's worker interrupts its function on
 * it, as Python's raises KeyboardInterrupt in the task); an actor's is not (Ray interrupts
 * no actor method; a binding cancels an async one's coroutine). Thread safety: the
 * method's thread. */
TR_API int tr_ctx_canceled(const tr_ctx *ctx);

/* Ends the actor for good once this method (or constructor) returns, as Ray's
 * exit_actor(): the call fails at its caller with TR_EACTOR_DIED and why (copied, up to
 * 300 bytes; NULL: "exited"), which the actor's details keep as its reason; calls not run
 * yet fail with TR_EACTOR_DIED; its destructor runs and it is never restarted. Returns
 * TR_EACTOR_DIED, for `return tr_ctx_exit_actor(ctx, "done");`; TR_ESTATE in a task (its
 * pool worker serves every job) or a compiled graph's step. Added in 0.11.
 * Thread safety: the method's thread. */
TR_API int tr_ctx_exit_actor(tr_ctx *ctx, const char *why);

/* Says the call failed though it replies a value (a binding's exception, pickled into its
 * result as Python's is): the node's metrics count it as an error. Thread safety: the
 * method's thread. */
TR_API void tr_ctx_failed(tr_ctx *ctx);

/* For a class's dispatch (tr_actor_class.dispatch) on an actor that runs several calls
 * at once (max_concurrency > 1, concurrency groups): the call has begun, and the next one
 * queued may begin too. Calls begin in the order they were queued: a method of
 * `methods` has begun once entered, a dispatch's call once it says so here (a binding
 * that hands the call to an event loop says it once the loop has it) or returns; a call
 * with refs among its arguments, as its arguments are waited for (they may be results
 * of calls queued after it).
 * Anywhere else: nothing. Thread safety: the method's thread. */
TR_API void tr_ctx_started(tr_ctx *ctx);

/* Sets the error message the caller will see and returns TR_ETASK, so a method can
 * `return tr_ctx_error(ctx, "bad input %d", x);`. Thread safety: the method's thread. */
TR_API int tr_ctx_error(tr_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* tr_ctx_error without formatting, for bindings that cannot call a variadic function:
 * msg (copied; NULL means no text) becomes the caller's error message. Returns TR_ETASK.
 * Thread safety: the method's thread. */
TR_API int tr_ctx_set_error(tr_ctx *ctx, const char *msg);

/* The worker's runtime, for calls made from inside a method (actors calling actors).
 * Thread safety: any thread. */
TR_API tr_runtime *tr_ctx_runtime(tr_ctx *ctx);

/* The name of the method running (static until it returns); "" in a constructor.
 * Thread safety: the method's thread. */
TR_API const char *tr_ctx_method(const tr_ctx *ctx);

/* The id of the actor running the method. Thread safety: any thread. */
TR_API tr_actor_id tr_ctx_actor_id(const tr_ctx *ctx);

/* The GPUs the node gave this actor (num_gpus), as CUDA_VISIBLE_DEVICES names them in its
 * process ("0,1"; inside the process they are devices 0..k-1); "" if none. Static text.
 * Thread safety: any thread. */
TR_API const char *tr_ctx_gpu_ids(const tr_ctx *ctx);

/* The number of refs passed with the call (tr_call_refs). Thread safety: the method's
 * thread. */
TR_API size_t tr_ctx_num_refs(const tr_ctx *ctx);
/* A read-only view of ref argument i (an object, zero-copy in the store, or another
 * call's result), valid until the method returns. Returns 0 or TR_EINVAL.
 * Thread safety: the method's thread. */
TR_API int tr_ctx_ref(const tr_ctx *ctx, size_t i, const void **data, size_t *len);

/* ------------------------------------------------------------------ configuration */

/* Creates an empty configuration (embedded node, defaults everywhere).
 * *out is NULL on failure. Thread safety: any thread. */
TR_API int tr_config_create(tr_config **out);

/* Destroys a configuration; NULL is a no-op. Thread safety: not thread-safe. */
TR_API void tr_config_destroy(tr_config *cfg);

/* Sets one option from text (both strings are copied). Keys:
 *   "address"                  node socket path to connect to; unset = start an embedded node;
 *                              "HOST:PORT": a cluster's head, which an embedded node joins
 *                              for this driver (with cluster_token) as a client: it runs no
 *                              actors (the head places them), it holds the driver's objects.
 *                              Unset, the environment's TROUPE_ADDRESS (`troupe slurm` sets
 *                              it for the job's command) stands in for it
 *   "num_cpus", "num_gpus"     node capacity (embedded or `troupe start`); default: the
 *                              machine's CPU count and the GPUs the NVIDIA driver lists
 *                              (no more than the node's CUDA_VISIBLE_DEVICES names; 0,
 *                              with the reason logged, without a GPU or driver)
 *   "memory"                   the node's "memory" resource in bytes, which actors and
 *                              tasks ask for as any resource (Ray's memory=); default: 70%
 *                              of the memory the machine has available at start, less
 *                              the object store
 *   "resources"                custom node resources, "name=qty[,name=qty...]"
 *   "log_level"                error|warn|info|debug (overrides TROUPE_LOG_LEVEL)
 *   "max_message_bytes"        largest accepted frame (default 64 MiB)
 *   "worker_start_timeout_ms"  how long a worker may take to come up (default 30000)
 *   "namespace"                the namespace of the actor names this runtime makes and
 *                              finds (Ray's; default "": unset, the environment's
 *                              TROUPE_NAMESPACE, else ""). Its actors' workers and its
 *                              tasks inherit it (tr_runtime_namespace; see
 *                              tr_actor_options.ns)
 *   "tmpdir"                   where the node's 0700 session directory goes (default /tmp)
 *   "object_store_bytes"       the node's shared-memory object store capacity (default
 *                              30% of RAM, at most 1 GiB; allocated up front)
 *   "spill_dir"                where objects go when the store is full (default: the
 *                              node's session directory); a fresh 0700 subdirectory is
 *                              made in it and removed when the node stops
 *   "call_spin_us"             how long a thread waiting for a call's reply, and an actor's
 *                              worker after a call, poll before they sleep (default 30; 0:
 *                              never). A sleeping peer's wake-up across CPUs costs more
 *                              than a small call. The poll costs CPU only right after
 *                              calls, never while idle; it stops while the machine has no
 *                              CPU to spare and for callers whose calls keep taking longer
 *                              than it (core/wait.h). A node gives its own to its workers
 *   "call_rings"               "1" (the default): this process's calls to actors of its
 *                              node go on a pair of shared-memory rings per actor (no
 *                              syscall while both sides poll; the socket stays, for
 *                              wake-ups and the end); "0": on the socket. The environment's
 *                              TROUPE_CALL_RINGS=0 or 1 overrides it, in every process
 *   "cpu_binding"              "cores" (the default): an actor created with num_cpus >= 1
 *                              is bound to that many whole CPUs of the node's, distinct
 *                              from every other bound actor's, as mpirun binds ranks; when
 *                              too few are free (more actors than CPUs) it floats. "none":
 *                              no actor is bound. tr_actor_info says which it got
 *   "metrics_port"             the node's HTTP port for Prometheus' /metrics and its status
 *                              page (0, the default: any free one; -1: none); its address
 *                              is tr_node_status's "dashboard" and `troupe start` prints
 *                              it; `--metrics-port`
 *   "metrics_host"             the address that port binds (default 127.0.0.1). The
 *                              node's user on loopback is served as it is; anyone else
 *                              must carry its token ("Authorization: Bearer TOKEN", or
 *                              ?token=TOKEN for a browser): the cluster's, or one the
 *                              node makes, in its session directory's metrics-token
 *                              (0600); `--metrics-host`
 *   "cluster_port"             the node's TCP port for other nodes of a cluster (-1, the
 *                              default: none; 0: any free one); `troupe start --port`
 *   "cluster_bind"             the address it binds (default: loopback on a head, the
 *                              address facing the head on another node); `--bind`
 *   "cluster_token"            the cluster's shared secret: 1..255 printable ASCII bytes,
 *                              no spaces. A cluster port never runs without one: a head
 *                              given none generates one (getrandom) and writes it, 0600,
 *                              to "cluster-token" in its session directory (`troupe start`
 *                              prints where); a node, driver or `troupe status` of the
 *                              same user on the same machine finds it there by the
 *                              head's port. Else set it here, with "cluster_token_file"
 *                              or with TROUPE_CLUSTER_TOKEN (these two keep it off
 *                              command lines, which every user can read); `--token`
 *   "cluster_token_file"       a file whose first line is the cluster's token (read at
 *                              once); `--token-file`
 *   "cluster_head"             "HOST:PORT" of the head to join (unset: none, or this node
 *                              is the head); `troupe start --address`
 *   "worker_command"           the program that runs workers and the embedded node, instead of
 *                              this executable: words separated by spaces (no quoting), the
 *                              first an executable's path or a name on PATH, e.g.
 *                              "/usr/bin/python3 -m troupe._worker". It must call tr_init or
 *                              tr_worker_main with the actor classes registered. "" goes
 *                              back to this executable
 *   "worker_path"              what else this node runs as a worker for a driver on
 *                              another node of a cluster, besides its own worker command:
 *                              programs, or directories whose programs it runs, separated
 *                              by ':' (each must exist); troupe-worker only with a library
 *                              listed here or its own worker_library. A listed program may
 *                              be given any arguments: list no interpreter. Default: none;
 *                              `troupe start --worker-path` (repeatable)
 *   "worker_library"           a shared object of actor classes: workers (and the node) run
 *                              the generic worker, "troupe-worker LIB" (found next to
 *                              libtroupe, in DIR or DIR/../bin, or on PATH), which loads it
 *                              and calls its `int troupe_module_init(tr_config *cfg)` to
 *                              register them. The later of the two keys wins
 *   "cluster_tls_cert", "cluster_tls_key", "cluster_tls_ca"
 *                              TLS between the nodes (all three, or none): PEM files of
 *                              this node's certificate chain and key, and of the CA that
 *                              signed every node's certificate for the name "troupe-node";
 *                              `--tls-cert`, `--tls-key`, `--tls-ca`. Mutual: every
 *                              connection shows a certificate both ways (for server and
 *                              client use). The token still authenticates; a driver
 *                              reaches other nodes with the files its node names
 * Returns 0, TR_EINVAL (unknown key or bad value, with the reason in tr_last_error).
 * Thread safety: not thread-safe. */
TR_API int tr_config_set(tr_config *cfg, const char *key, const char *value);

/* Registers an actor class (the struct is copied; its method table is borrowed).
 * Returns 0, TR_EINVAL (NULL, no name, bad struct_size), TR_EEXIST (name taken).
 * Thread safety: not thread-safe. */
TR_API int tr_config_add_class(tr_config *cfg, const tr_actor_class *cls);

/* A remote function (a task): gets its arguments and writes its result through ctx, as
 * a method does (tr_ctx_reply, tr_ctx_error, tr_ctx_ref, tr_ctx_runtime...). */
typedef int (*tr_task_fn)(tr_ctx *ctx, const void *args, size_t len);

/* Registers a remote function under name (copied), for tr_task_submit; with name NULL,
 * the function runs every task whose name is not registered (a binding's dispatch: the
 * name is tr_ctx_method's). Returns 0, TR_EINVAL, TR_EEXIST. Thread safety: not
 * thread-safe. */
TR_API int tr_config_add_function(tr_config *cfg, const char *name, tr_task_fn fn);

/* ------------------------------------------------------------------ runtime */

/* Starts the runtime. With no "address" it starts an embedded node service as a child
 * process (stopped by tr_shutdown); with one, it connects to that node. cfg is borrowed
 * for the call (copied). In a worker process started by troupe this runs the worker and
 * never returns. *out is NULL on failure. tr_init is an inline wrapper passing the
 * header's TR_ABI_VERSION to tr_init_abi (bindings call tr_init_abi), so a header/library
 * mismatch is caught (TR_EVERSION).
 * Returns 0, TR_EINVAL, TR_ECONNECT (node unreachable or failed to start), TR_EVERSION,
 * TR_ENOMEM. Thread safety: any thread; one runtime per process. */
TR_API int tr_init_abi(const tr_config *cfg, tr_runtime **out, unsigned abi_version);
static inline int tr_init(const tr_config *cfg, tr_runtime **out) {
    return tr_init_abi(cfg, out, TR_ABI_VERSION);
}

/* In a worker process started by troupe: runs the worker with cfg's classes and exits.
 * Elsewhere: returns TR_ESTATE at once. Useful in programs (test runners) whose main must
 * decide its role before doing anything else. Thread safety: main thread. */
TR_API int tr_worker_main(const tr_config *cfg);

/* Stops the runtime: closes connections, drops unreleased refs; for an embedded node,
 * stops it and its workers and removes its sockets. NULL is a no-op.
 * Thread safety: not thread-safe (no other tr_ call on rt may be running). */
TR_API void tr_shutdown(tr_runtime *rt);

/* The node's address (its socket path), borrowed until tr_shutdown.
 * Thread safety: any thread. */
TR_API const char *tr_runtime_address(const tr_runtime *rt);

/* The namespace (up to 255 bytes; "": the default) of the actor names rt makes and finds
 * now, into buf (cap bytes, 256 always enough): in a driver, its config's "namespace"
 * (else TROUPE_NAMESPACE, else ""); in an actor's worker, its creator's; in a task, the
 * namespace of the runtime that submitted it (a task worker runs the tasks of every job,
 * each in its own). TR_EINVAL if buf is too small. Added in 0.11.
 * Thread safety: any thread. */
TR_API int tr_runtime_namespace(tr_runtime *rt, char *buf, size_t cap);

/* Node status as a JSON object (pid, address, resources, actors, object store, groups;
 * every field is described in docs/NODE.md). *json_out is the caller's, freed with
 * tr_free. Returns 0, TR_ECONNECT, TR_ETIMEDOUT. Thread safety: any thread. */
TR_API int tr_node_status(tr_runtime *rt, char **json_out);

/* Writes the timeline of this node's processes to path, as Chrome trace-event JSON
 * (Perfetto and chrome://tracing load it): each driver's and worker's last 8192 events,
 * always recorded - calls submitted and run (a track per actor, arrows from a call's
 * submission to its run), gets, puts, collective ops (arrows between their ranks), graph
 * steps, pulls (docs/OBSERVABILITY.md). Returns 0, TR_EINVAL (a NULL path), TR_EIO (path
 * cannot be written), TR_ENOMEM. Thread safety: any thread. */
TR_API int tr_timeline_dump(tr_runtime *rt, const char *path);

/* ------------------------------------------------------------------ key-value store */

/* The node's key-value store (used for collective rendezvous; open to users). Values are
 * copied. tr_kv_get sets *value (caller frees with tr_free) and *len.
 * Return 0, TR_ENOTFOUND, TR_EINVAL, TR_EMSGSIZE, TR_ECONNECT. Thread safety: any thread. */
TR_API int tr_kv_put(tr_runtime *rt, const char *key, const void *value, size_t len);
TR_API int tr_kv_get(tr_runtime *rt, const char *key, void **value, size_t *len);
TR_API int tr_kv_del(tr_runtime *rt, const char *key);

/* ------------------------------------------------------------------ actors */

typedef struct tr_resource {
    const char *name;
    double quantity;
} tr_resource;

/* A placement group, by value (tr_placement_group_create); all zero: none. A stale id
 * gives TR_ENOTFOUND. */
typedef struct tr_pg_id {
    uint8_t b[16];
} tr_pg_id;

/* A concurrency group of an actor (Ray's concurrency_groups): up to max_concurrency
 * (1..65536) of its calls run at once, each on a thread of the worker's, beside the other
 * groups' and the actor's own max_concurrency (its default group), never counted against
 * them. A call runs in the group that lists its method, or in the one its method names
 * after an '@' ("method@group": the call's own choice, Ray's per-call
 * concurrency_group); any other in the default group. A name is 1..63 bytes without
 * ';', '=', ':', ',' or '@'; methods likewise. */
typedef struct tr_concurrency_group {
    const char *name;
    int max_concurrency;
    const char *const *methods;
    size_t n_methods;
} tr_concurrency_group;

typedef struct tr_actor_options {
    uint32_t struct_size;         /* TR_STRUCT_SIZE(tr_actor_options) */
    double num_cpus;              /* default 0, as Ray's actors once placed; >= 1 also binds
                                     the actor to that many whole CPUs (cpu_binding) */
    double num_gpus;              /* default 0; k >= 1 (whole): k GPUs of its own, k < 1:
                                     a share of one; its worker sees only those
                                     (CUDA_VISIBLE_DEVICES; none if it asked for none) */
    const tr_resource *resources; /* custom resources; borrowed for the call */
    size_t n_resources;
    const char *name; /* unique actor name or NULL; copied */
    int max_restarts; /* restarts after a crash: 0 (default), n, or -1 forever */
    /* Added in 0.4 (struct_size tells): a placement group to run in (all zero: none; see
     * tr_placement_group_create), and which of its bundles: 0..n-1, or -1 (the default)
     * for any. The actor's num_cpus, num_gpus and resources then come out of the
     * bundle's reservation (it waits, PENDING, until the group is placed and its bundle
     * has room); its GPUs are devices of that bundle. */
    tr_pg_id placement_group;
    int bundle_index;
    /* Added in 0.4: non-zero: the actor outlives the process that created it (Ray's
     * lifetime="detached"): it lives until tr_actor_kill or its node's end, found by name
     * from any process (give it one). Default 0: it dies with its creator. */
    int detached;
    /* Added in 0.4: how many of its method calls the actor runs at once (Ray's
     * max_concurrency). 1 (the default; 0 reads as 1): one at a time, in the order each
     * caller sent them. N > 1 (up to 65536): up to N at once, each on a thread of the
     * worker's own (made as they are needed) with its own tr_ctx, and no lock between
     * them: the class's methods must then be thread-safe (the constructor and destructor
     * still run alone). Calls start in the order each caller sent them and return as
     * they finish (a fast call's result does not wait behind a slow one's). A compiled
     * graph's steps on such an actor run beside its calls (steps of its graphs still run
     * one at a time among themselves). */
    int max_concurrency;
    /* Added in 0.5: the actor's concurrency groups (n of them, up to 64; copied), each
     * running its calls on threads of its own (tr_concurrency_group). Default none. */
    const tr_concurrency_group *concurrency_groups;
    size_t n_concurrency_groups;
    /* Added in 0.6: the actor's class as the node's status, metrics and lists show it (a
     * binding's own class name: Python's, where every class runs as one C class); NULL
     * (the default): the class registered. Up to 200 bytes, copied. */
    const char *class_label;
    /* Added in 0.7: a string a binding keeps with the actor for any process that finds it
     * later (tr_actor_binding_data), as a language binding needs to call it as its
     * creator would: e.g. which methods return several values or stream them. Up to
     * TR_ACTOR_BINDING_DATA_MAX bytes, copied; NULL (the default): none. troupe never
     * reads it. */
    const char *binding_data;
    /* Added in 0.8: how many times a call that was in flight when the actor's worker died
     * is sent again, to its next incarnation (Ray's max_task_retries): 0 (the default):
     * it fails with TR_EACTOR_DIED; n; or -1, always. Only an actor that restarts
     * (max_restarts) has a next incarnation. Resent calls run at least once, perhaps
     * twice (the first run may have got to any point); they go ahead of the calls sent
     * after them, in the order they were sent. Any process calling the actor does so,
     * the one that created it or another that found it. */
    int max_task_retries;
    /* Added in 0.9: the namespace its name lives in (Ray's namespace); NULL (the
     * default): the runtime's (tr_config "namespace"). Names are unique per namespace:
     * "a" in one and "a" in another are two actors; tr_actor_get finds names of the
     * runtime's namespace, tr_actor_get_in those of any. Up to 255 bytes, no byte 0x1f
     * (troupe keeps the name as namespace, 0x1f, name; the default namespace "" as the
     * name alone, as before 0.9). Copied. */
    const char *ns;
} tr_actor_options;

#define TR_ACTOR_BINDING_DATA_MAX 4096

#define TR_ACTOR_OPTIONS_INIT                                                                      \
    {                                                                                              \
        TR_STRUCT_SIZE(tr_actor_options), 0.0, 0.0, NULL, 0, NULL, 0, {{0}}, -1, 0, 1, NULL, 0,    \
            NULL, NULL, 0, NULL                                                                    \
    }
/* Same as TR_ACTOR_OPTIONS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_actor_options_init(tr_actor_options *opts);

/* Creates an actor of a registered class; opts may be NULL. args (copied) go to the
 * constructor. Returns once the node has placed the actor or queued it for resources that
 * are busy; the worker starts in the background (tr_actor_wait_ready waits for it).
 * Returns 0, TR_EINVAL, TR_ERESOURCES (can never fit on this node), TR_EEXIST (name
 * taken), TR_EMSGSIZE, TR_ECONNECT. Thread safety: any thread. */
TR_API int tr_actor_create(tr_runtime *rt, const char *class_name, const tr_actor_options *opts,
                           const void *args, size_t len, tr_actor_id *out);

/* Waits until the actor's constructor has run. Returns 0, TR_EACTOR_DIED (constructor
 * failed, unknown class, or the actor died: the reason is in tr_last_error), TR_ETIMEDOUT,
 * TR_ENOTFOUND. Thread safety: any thread. */
TR_API int tr_actor_wait_ready(tr_runtime *rt, tr_actor_id actor, int timeout_ms);

/* Looks up a named actor of the runtime's namespace (tr_config "namespace"; in a worker
 * that leaves it unset, the environment's TROUPE_NAMESPACE; else "", the default).
 * Returns 0, TR_ENOTFOUND, TR_EINVAL. Thread safety: any thread. */
TR_API int tr_actor_get(tr_runtime *rt, const char *name, tr_actor_id *out);
/* Looks up a named actor of namespace ns (NULL: the runtime's, as tr_actor_get). Added in
 * 0.9. Returns 0, TR_ENOTFOUND, TR_EINVAL. Thread safety: any thread. */
TR_API int tr_actor_get_in(tr_runtime *rt, const char *ns, const char *name, tr_actor_id *out);

/* The binding_data the actor was created with (tr_actor_options), from any process of
 * the cluster: *out is the caller's, freed with tr_free, or NULL if it has none. Returns
 * 0, TR_ENOTFOUND (no such actor), TR_EINVAL, TR_ECONNECT. Thread safety: any thread. */
TR_API int tr_actor_binding_data(tr_runtime *rt, tr_actor_id actor, char **out);

/* Kills the actor's process. With no_restart non-zero it stays dead; otherwise it restarts
 * if it has restarts left. Pending calls get TR_EACTOR_DIED. Returns 0, TR_ENOTFOUND.
 * Thread safety: any thread. */
TR_API int tr_actor_kill(tr_runtime *rt, tr_actor_id actor, int no_restart);

/* Makes the handle of an actor this process created, so that the actor ends with its last
 * one (Ray's counted actor handles): *out gets a ref (an object of the node's store, owned
 * here) that stands for the actor. Pass it on as any ref (tr_call_contains, tr_put_refs,
 * tr_ctx_reply_contains); each process that keeps a copy borrows it (tr_ref_borrow) and
 * lets go with tr_ref_release, as any object. Once this process has released it and no
 * other holder is left (no process, object or call in flight holds it), the actor ends:
 * behind the calls this process sent it before, its worker replies to those, is marked
 * DEAD for good (reason "ended: no handle of it was left"; no restart) and exits orderly
 * (its destructor runs). An actor without one lives until tr_actor_kill or its creator's
 * end; made and released at once, it ends now (a binding's only handle, never copied).
 * One per actor (a second: TR_EEXIST). Returns 0, TR_EEXIST, TR_ENOMEM, or tr_put's
 * codes. Thread safety: any thread. */
TR_API int tr_actor_handle(tr_runtime *rt, tr_actor_id actor, tr_ref *out);

/* The actor a handle names (tr_actor_handle), into *out, from any process that has the
 * ref; as tr_get, this process then holds it (tr_ref_release). Returns 0, TR_EINVAL (not
 * a handle), or tr_get's codes. Thread safety: any thread. */
TR_API int tr_actor_from_handle(tr_runtime *rt, tr_ref handle, tr_actor_id *out);

/* An actor's lifecycle, as tr_actor_info reports it. */
typedef enum tr_actor_state {
    TR_ACTOR_PENDING = 0,    /* waiting for resources to free up */
    TR_ACTOR_STARTING = 1,   /* its worker is starting, the constructor has not finished */
    TR_ACTOR_ALIVE = 2,      /* serving calls */
    TR_ACTOR_RESTARTING = 3, /* died; a new worker is starting (max_restarts) */
    TR_ACTOR_DEAD = 4,       /* for good: killed, crashed out of restarts, or its owner left */
} tr_actor_state;

/* What the node knows of an actor (tr_actor_info). Strings are NUL-terminated, cut to fit. */
typedef struct tr_actor_details {
    uint32_t struct_size; /* TR_STRUCT_SIZE(tr_actor_details) */
    int32_t state;        /* a tr_actor_state */
    int32_t pid;          /* its worker's process id; 0 while none runs */
    int32_t restarts;     /* restarts so far */
    int32_t max_restarts; /* as created: 0, n, or -1 (forever) */
    char class_name[256]; /* its class */
    char name[256];       /* its name; "" if it has none */
    char node[256];       /* the address of the node it lives on */
    char reason[512];     /* why it last died; "" if it never did */
    char cpus[128];       /* the CPUs it is bound to ("0,1"); "" if it floats (cpu_binding) */
    char gpus[1024];      /* the GPUs it was given, as CUDA_VISIBLE_DEVICES names them */
} tr_actor_details;

#define TR_ACTOR_DETAILS_INIT                                                                      \
    { TR_STRUCT_SIZE(tr_actor_details), 0, 0, 0, 0, "", "", "", "", "", "" }
/* Same as TR_ACTOR_DETAILS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_actor_details_init(tr_actor_details *out);

/* Fills *out (struct_size set) with the actor's state, worker pid, restarts, class, name,
 * node and last death reason; a dead actor is reported until its creator leaves. Returns
 * 0, TR_EINVAL, TR_ENOTFOUND (no such actor, or forgotten), TR_ECONNECT.
 * Thread safety: any thread. */
TR_API int tr_actor_info(tr_runtime *rt, tr_actor_id actor, tr_actor_details *out);

/* "PENDING", "STARTING", "ALIVE", "RESTARTING", "DEAD"; "UNKNOWN" otherwise (static).
 * Thread safety: any thread. */
TR_API const char *tr_actor_state_name(int state);

/* Hex text of an id into buf (at least 33 bytes). Returns buf. Thread safety: any thread. */
TR_API char *tr_actor_id_str(tr_actor_id id, char *buf);

/* ------------------------------------------------------------------ calls */

/* Calls a method; returns at once with a ref to its result. args are copied. Calls to one
 * actor from one process run in the order they were made. Never blocks on the actor:
 * if it is not up yet, the call is queued and sent by a later tr_get/tr_wait.
 * Returns 0, TR_EINVAL, TR_EMSGSIZE, TR_ENOMEM, TR_ENOTFOUND (unknown actor).
 * Thread safety: any thread. */
TR_API int tr_call(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                   size_t len, tr_ref *out);
/* As tr_call, but it never waits, not even for the library's own lock: where tr_call might
 * (another thread of the process holds the lock, or the actor has no connection yet: its
 * first calls, after a restart, which may ask the node) it returns TR_EAGAIN with nothing
 * done. For bindings that call with a lock of their own held (Python's GIL): they call
 * tr_call with it let go then. Added in 0.12. Thread safety: any thread. */
TR_API int tr_call_nowait(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                          size_t len, tr_ref *out);

/* As tr_call, passing refs as arguments: objects (tr_put) and other calls' results (refs
 * from tr_call made in this process), in any mix; the method reads argument i with
 * tr_ctx_ref. Each object is kept alive until the call completes (even if the caller
 * releases its ref meanwhile), and the worker resolves it before the method runs,
 * waiting for a seal if needed. A call's result is waited for in the caller, as in Ray:
 * the call (and every later call to the same actor, to keep their order) is sent once the
 * result is in - a result up to 100 KiB inside the call, a larger one as the store
 * object it already is, zero-copy. A thread of this process inside tr_get or tr_wait
 * sends it, or, if none waits, the process's driver thread (every call submitted runs,
 * as Ray's tasks do, whether or not its result is ever got). If that call failed, this one fails
 * with the same code (TR_ETASK with its message, TR_EACTOR_DIED, ...) and its method never
 * runs. The caller may release the argument refs at once. Returns as tr_call, and
 * TR_ENOTFOUND for an object that does not exist, TR_ESTALE for a ref that is neither an
 * object nor a live call ref of this process. Thread safety: any thread. */
TR_API int tr_call_refs(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                        size_t len, const tr_ref *refs, size_t n_refs, tr_ref *out);

/* As tr_call_refs, for a method that returns num_returns results (1..1024; Ray's
 * num_returns): outs gets that many refs, each resolving to one part of the method's
 * tr_ctx_reply_multi (or all to the call's failure; a method that replied one value
 * instead fails them with TR_ETASK saying so). Thread safety: any thread. */
TR_API int tr_call_multi(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                         size_t len, const tr_ref *refs, size_t n_refs, size_t num_returns,
                         tr_ref *outs);

/* num_returns for a stream (Ray's num_returns="streaming"), to tr_call_multi and
 * tr_task_submit_multi: outs gets one ref, the stream's, and the method's items
 * (tr_ctx_yield) come with tr_stream_next as it yields them. */
#define TR_STREAMING ((size_t)-1)

/* The next item of a stream (a call or task made with num_returns TR_STREAMING), as soon
 * as its method has yielded it: *item is the item's ref, this process's as a call's result
 * is (tr_get, tr_wait, passed on, tr_ref_release). Items come in the order yielded, each
 * once. Returns 0 (an item), 1 (the end: the method ended and every item was taken;
 * tr_get of the stream ref says how it ended, e.g. TR_ETASK with its error, or
 * TR_EACTOR_DIED), TR_ETIMEDOUT (no item yet), TR_ESTALE (not a live stream ref of this
 * process), TR_EINVAL. Releasing the stream ref lets go of the items not taken. A task
 * run again after its worker died (max_retries) starts over: the items it yields again
 * are skipped, as Ray does (its generator should yield the same items). Thread safety:
 * any thread. */
TR_API int tr_stream_next(tr_runtime *rt, tr_ref stream, int timeout_ms, tr_ref *item);

/* As tr_call_refs, for arguments that contain refs (`contained`, n_contained of them:
 * refs nested in args' bytes, which a binding's serializer finds). Each is kept alive
 * until the call completes, so the method may tr_get it and tr_ref_borrow it to keep it
 * longer; a result of this process's own call among them is shared (its value goes to
 * the node's store once it is in: a small one copied once, a large one renamed, never
 * copied) while this process stays its owner. A call whose arguments hold no refs costs
 * what tr_call costs. Returns as tr_call_refs, and TR_EOWNER_DIED for a contained ref
 * whose owner is gone. Thread safety: any thread. */
TR_API int tr_call_contains(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                            size_t len, const tr_ref *refs, size_t n_refs, const tr_ref *contained,
                            size_t n_contained, tr_ref *out);

/* tr_call_options.max_task_retries: the actor's own (tr_actor_options.max_task_retries). */
#define TR_RETRIES_ACTOR (-2)

/* Added in 0.10: what tr_call_opts takes beyond tr_call_refs' arguments. Versioned by
 * struct_size, as the other option structs. */
typedef struct tr_call_options {
    uint32_t struct_size; /* TR_STRUCT_SIZE(tr_call_options) */
    /* how many results (as tr_call_multi): 1 (the default), up to 1024, or TR_STREAMING;
     * outs has that many refs (a stream: one) */
    size_t num_returns;
    /* refs nested in args (as tr_call_contains); borrowed for the call */
    const tr_ref *contained;
    size_t n_contained;
    /* how many times this call goes again to the actor's next incarnation if the worker
     * dies with it in flight, for this call alone (Ray's per-method max_task_retries over
     * the actor's): TR_RETRIES_ACTOR (the default), the actor's max_task_retries; 0,
     * never; n; or -1, always. As the actor's, only an actor that restarts has a next
     * incarnation. */
    int max_task_retries;
} tr_call_options;

#define TR_CALL_OPTIONS_INIT                                                                       \
    { TR_STRUCT_SIZE(tr_call_options), 1, NULL, 0, TR_RETRIES_ACTOR }
/* Same as TR_CALL_OPTIONS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_call_options_init(tr_call_options *opts);

/* A call with options (NULL: TR_CALL_OPTIONS_INIT's, the same as tr_call_refs): one of
 * several results, with contained refs, or with retries of its own, in any mix. Returns
 * as tr_call_contains and tr_call_multi. Thread safety: any thread. */
TR_API int tr_call_opts(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                        size_t len, const tr_ref *refs, size_t n_refs, const tr_call_options *opts,
                        tr_ref *outs);

/* Cancels a call or task this process made that is not done yet (Ray's ray.cancel): its
 * ref (every use of it: tr_get, calls waiting for it, borrowers) fails with TR_ECANCELED
 * at once. A call still waiting for its arguments never goes out; one already sent to a
 * worker is not run there if it has not begun (the worker keeps the last 4 cancels it
 * was sent), and one that has is told (tr_ctx_canceled) and its result is dropped. On
 * another node alike: the cancel follows the call over the link, and that node's relay
 * tells the worker (a cancel that finds no connection there, the call having gone
 * nowhere yet, is dropped: the call runs and its result is dropped). With force non-zero, a task
 * already sent is stopped: its pool worker is killed (and restarts; other tasks it was running are
 * run again, as on any worker death); force on an actor's call is TR_EINVAL. A ref that is done
 * already: 0, nothing changes. Returns 0, TR_ESTALE (not a live ref of ours), TR_EINVAL. Thread
 * safety: any thread. */
TR_API int tr_cancel(tr_runtime *rt, tr_ref ref, int force);

/* Makes this process a holder of a ref it received (nested in a value, an object, a call's
 * arguments or result) and did not make: the value stays alive for it until its
 * tr_ref_release, whatever its owner and the container it came in do. Take it while the
 * container is still held (during the call; before releasing the object or result it was
 * in). A ref this process made is held already: 0, nothing changes. Returns 0,
 * TR_EINVAL, TR_ENOTFOUND (no such value: never made, or freed), TR_EOWNER_DIED (a call
 * result whose owner died before it was in). Thread safety: any thread. */
TR_API int tr_ref_borrow(tr_runtime *rt, tr_ref ref);

/* ------------------------------------------------------------------ tasks */

/* How a task runs. num_cpus (default 1) counts against the pool's size (the node's CPUs
 * divided by it; a task's own nested tasks may use up to four times that, so a parent
 * waiting for its children never starves them) and is held while the task runs
 * (tr_node_status's "resources_in_tasks"); num_gpus and resources are reserved by each
 * worker of the task's pool (placed as an actor is, on any node of a cluster), and given
 * up by an idle one to an actor or a placement group that waits for them (the worker ends
 * and starts again with its next task). A task that no node has the resources for fails
 * at submit with TR_ERESOURCES, as such an actor does.
 * max_retries (default 3, -1: always): how many times a task whose worker died with it
 * in flight is run again before its ref fails with TR_EACTOR_DIED and the reason.
 * contained: refs nested in args (as tr_call_contains). */
typedef struct tr_task_options {
    uint32_t struct_size; /* TR_STRUCT_SIZE(tr_task_options) */
    double num_cpus;
    double num_gpus;
    const tr_resource *resources; /* borrowed for the call */
    size_t n_resources;
    int max_retries;
    const tr_ref *contained; /* borrowed for the call */
    size_t n_contained;
    /* Added in 0.4: as tr_actor_options' two fields, for the task's pool (its workers
     * are actors in that bundle: num_gpus and resources come out of it). */
    tr_pg_id placement_group;
    int bundle_index;
} tr_task_options;

#define TR_TASK_OPTIONS_INIT                                                                       \
    { TR_STRUCT_SIZE(tr_task_options), 1.0, 0.0, NULL, 0, 3, NULL, 0, {{0}}, -1 }
/* Same as TR_TASK_OPTIONS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_task_options_init(tr_task_options *opts);

/* Runs remote function fn (tr_config_add_function in the executable the node runs as its
 * workers) with args (copied) and refs (as tr_call_refs) on a worker of the node's task
 * pool: processes started on first use and kept warm for every later task of any process
 * of the node (of the same resource shape), each running one task at a time. *out is the
 * task's result ref, as a call's: tr_get, tr_wait, tr_ref_release, passed on to other
 * processes (tr_call_contains...). opts may be NULL. Returns 0, TR_EINVAL, TR_ENOMEM,
 * TR_ERESOURCES (the shape can never be placed), TR_ECONNECT; the function's own failure
 * is the ref's (TR_ETASK with its message; TR_ENOMETHOD-like text for an unknown name).
 * Thread safety: any thread. */
TR_API int tr_task_submit(tr_runtime *rt, const char *fn, const void *args, size_t len,
                          const tr_ref *refs, size_t n_refs, const tr_task_options *opts,
                          tr_ref *out);

/* As tr_task_submit, for a function that returns num_returns results (see tr_call_multi).
 * Thread safety: any thread. */
TR_API int tr_task_submit_multi(tr_runtime *rt, const char *fn, const void *args, size_t len,
                                const tr_ref *refs, size_t n_refs, const tr_task_options *opts,
                                size_t num_returns, tr_ref *outs);

/* ------------------------------------------------------------------ placement groups */

/* How a group's bundles go on the nodes (as Ray's strategies): PACK as few nodes as
 * possible (several if need be), SPREAD distinct nodes where possible, STRICT_PACK all
 * on one node or none, STRICT_SPREAD each bundle on a node of its own or none. A node in
 * no cluster has only itself: PACK, SPREAD and STRICT_PACK put every bundle there;
 * STRICT_SPREAD with more than one bundle stays PENDING (the reason says so). In a
 * cluster the head places every group across the live nodes (docs/CLUSTER.md). */
enum { TR_PG_PACK = 0, TR_PG_SPREAD = 1, TR_PG_STRICT_PACK = 2, TR_PG_STRICT_SPREAD = 3 };

/* A placement group's lifecycle (tr_pg_info.state). */
enum { TR_PG_PENDING = 0, TR_PG_CREATED = 1, TR_PG_REMOVED = 2 };

/* One bundle: resources reserved together on one node. At least one quantity > 0;
 * num_gpus is a share of one GPU (< 1) or whole GPUs; custom names up to 17 bytes (the
 * reserved copies the node makes of them carry the group's tag). */
typedef struct tr_bundle {
    uint32_t struct_size; /* TR_STRUCT_SIZE(tr_bundle) */
    double num_cpus;
    double num_gpus;
    const tr_resource *resources; /* borrowed for the call */
    size_t n_resources;
} tr_bundle;

#define TR_BUNDLE_INIT                                                                             \
    { TR_STRUCT_SIZE(tr_bundle), 0.0, 0.0, NULL, 0 }
/* Same as TR_BUNDLE_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_bundle_init(tr_bundle *b);

/* Reserves n bundles (1..64; each element's struct_size is its stride) with a strategy
 * (TR_PG_*), as Ray's placement_group: atomically, every bundle or none, now or later
 * when resources free up; returns at once with its id. While it cannot be placed it
 * stays PENDING and tr_placement_group_info says why (resources busy, or more than the
 * node has at all: it then waits for good, never half placed). name (may be NULL or "")
 * is unique among the live groups of its namespace (the runtime's, tr_runtime_namespace;
 * of the cluster, in one). The group lives until
 * tr_placement_group_remove or until its creator's process exits. Returns 0, TR_EINVAL
 * (no bundles, a bundle with nothing in it, a negative or non-finite quantity, a bad name,
 * an unknown strategy), TR_EEXIST (name taken), TR_ESTATE (a cluster's client node that
 * cannot reach the cluster), TR_ECONNECT (also: the cluster's head out of reach). Thread
 * safety: any thread. */
TR_API int tr_placement_group_create(tr_runtime *rt, const tr_bundle *bundles, size_t n,
                                     int strategy, const char *name, tr_pg_id *out);

/* Waits up to timeout_ms (TR_FOREVER: no limit) until the group is placed. Returns 0,
 * TR_ETIMEDOUT (still PENDING; the reason is in tr_last_error), TR_ESTATE (removed),
 * TR_ENOTFOUND, TR_ECONNECT. Thread safety: any thread. */
TR_API int tr_placement_group_wait(tr_runtime *rt, tr_pg_id pg, int timeout_ms);

/* What the node knows of a group (tr_placement_group_info). Strings are cut to fit. */
typedef struct tr_pg_info {
    uint32_t struct_size; /* TR_STRUCT_SIZE(tr_pg_info) */
    int32_t state;        /* TR_PG_PENDING, TR_PG_CREATED, TR_PG_REMOVED */
    int32_t strategy;     /* TR_PG_* */
    int32_t n_bundles;
    char name[256];     /* "" if it has none */
    char reason[512];   /* why it is PENDING (or was removed); "" once placed */
    char bundles[2048]; /* "CPU=1,GPU=1;CPU=2": each bundle's resources, ';' between */
    char node[256];     /* the address of the node it is placed on ("" while PENDING); in
                           a cluster, if on several: each bundle's, ';' between (cut to
                           fit) */
} tr_pg_info;

#define TR_PG_INFO_INIT                                                                            \
    { TR_STRUCT_SIZE(tr_pg_info), 0, 0, 0, "", "", "", "" }
/* Same as TR_PG_INFO_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_pg_info_init(tr_pg_info *out);

/* Fills *out (struct_size set) with the group's state, strategy, bundles and the reason
 * it waits. A removed group is reported until its creator exits. Returns 0, TR_EINVAL,
 * TR_ENOTFOUND, TR_ECONNECT. Thread safety: any thread. */
TR_API int tr_placement_group_info(tr_runtime *rt, tr_pg_id pg, tr_pg_info *out);

/* Removes the group, as Ray does: kills every actor (and task worker) scheduled into it
 * and gives its resources back to the node (at once: tr_node_status shows them; the
 * killed workers' processes go in the background). Removing it again: 0. Returns 0,
 * TR_ENOTFOUND, TR_ECONNECT. Thread safety: any thread. */
TR_API int tr_placement_group_remove(tr_runtime *rt, tr_pg_id pg);

/* The live (not removed) group named name in the runtime's namespace
 * (tr_runtime_namespace). Returns 0, TR_ENOTFOUND, TR_EINVAL.
 * Thread safety: any thread. */
TR_API int tr_placement_group_get(tr_runtime *rt, const char *name, tr_pg_id *out);

/* Hex text of an id into buf (at least 33 bytes). Returns buf. Thread safety: any thread. */
TR_API char *tr_pg_id_str(tr_pg_id id, char *buf);

/* Waits up to timeout_ms for a call's result or a sealed object (see tr_put). On 0, *data
 * and *len view the result, valid until tr_ref_release (tr_get may be repeated). On TR_ETASK the
 * method's message is in tr_last_error() and also in *data (NUL-terminated). Returns 0,
 * TR_ETIMEDOUT (the ref stays valid), TR_ETASK, TR_ENOMETHOD, TR_EACTOR_DIED, TR_ESTALE, TR_EINVAL.
 * Thread safety: any thread. */
TR_API int tr_get(tr_runtime *rt, tr_ref ref, int timeout_ms, const void **data, size_t *len);

/* Waits until at least num_ready of the n refs are done (a call's result or error; an
 * object sealed) or timeout_ms passes. ready (n bytes, may be NULL) gets 1 for each done ref;
 * *n_ready (may be NULL) the count. A timeout is not an error. Returns 0, TR_EINVAL, TR_ESTALE.
 * Thread safety: any thread. */
TR_API int tr_wait(tr_runtime *rt, const tr_ref *refs, size_t n, size_t num_ready, int timeout_ms,
                   uint8_t *ready, size_t *n_ready);

/* Drops a ref: a call's result, or this process's hold on an object or borrowed ref (whose
 * memory returns once nothing holds it). Returns 0, TR_ESTALE. Thread safety: any thread. */
TR_API int tr_ref_release(tr_runtime *rt, tr_ref ref);

/* ------------------------------------------------------------------ objects */

/* Copies len bytes into the node's shared-memory object store and returns a ref to the
 * sealed (immutable) object, held by this process until tr_ref_release. No round trip to
 * the node. Memory returns as soon as no process holds an object (nothing is cached).
 * When the store is full, the least recently used objects that no process is viewing
 * (through tr_get) are spilled to disk, and read back on tr_get: nothing referenced is
 * ever lost. tr_get on an object ref gives a read-only view straight into shared memory
 * (no copy), valid until this process releases the ref; any process on the node that
 * has the ref (e.g. passed in call arguments) may tr_get it, which makes it a holder too.
 * Returns 0, TR_EINVAL, TR_ENOMEM (the store is full, or the object can never fit: the
 * message says the capacity). Thread safety: any thread. */
TR_API int tr_put(tr_runtime *rt, const void *data, size_t len, tr_ref *out);

/* As tr_put, for an object that contains refs (e.g. a list of tensors, or of call
 * results): each contained value stays alive at least as long as this one, even after
 * every process has released it; a result of this process's own call is shared (see
 * tr_call_contains). tr_object_refs gives them back. Returns as tr_put, and TR_ENOTFOUND
 * if a contained ref names no value, TR_EOWNER_DIED if its owner is gone, TR_ESTALE for a
 * released call ref of ours. Thread safety: any thread. */
TR_API int tr_put_refs(tr_runtime *rt, const void *data, size_t len, const tr_ref *refs,
                       size_t n_refs, tr_ref *out);

/* The refs contained in an object (tr_put_refs): up to cap of them into out, their number
 * in *n. Returns 0, TR_ENOTFOUND, TR_EINVAL. Thread safety: any thread. */
TR_API int tr_object_refs(tr_runtime *rt, tr_ref ref, tr_ref *out, size_t cap, size_t *n);

/* How many others hold an object made on this node (tr_put, tr_put_refs): the other
 * processes of the node with a hold on it (borrowers on other nodes count as one, the
 * node's relay that holds it for them), the objects that contain it and this process's
 * calls in flight that pass it (tr_call_contains), into *others.
 * The ref stays held by this process. A binding that ties something to an object's
 * lifetime asks it (Python's actor handles: the actor ends once no copy of its handle
 * is left anywhere). Returns 0, TR_ENOTFOUND (not in this node's store), TR_EINVAL.
 * Thread safety: any thread. */
TR_API int tr_object_holders(tr_runtime *rt, tr_ref ref, size_t *others);

/* A private, writable view of an object (or of a shared call result): copy-on-write, so
 * nothing is copied until a page is written, and a written page is this process's alone
 * (the object never changes). Waits up to timeout_ms for its seal. The object stays held
 * and resident until tr_object_unmap_private(rt, ref, *data, *len). For a method that
 * keeps and changes an argument in place (Ray gives methods writable arrays). Returns 0,
 * TR_ENOTFOUND, TR_ETIMEDOUT, TR_EIO, TR_ENOMEM. Thread safety: any thread. */
TR_API int tr_object_map_private(tr_runtime *rt, tr_ref ref, int timeout_ms, void **data,
                                 size_t *len);
TR_API int tr_object_unmap_private(tr_runtime *rt, tr_ref ref, void *data, size_t len);

/* Allocates an object of len bytes for the caller to write in place (*buf, writable until
 * tr_object_seal); others see it only once sealed. Returns as tr_put.
 * Thread safety: any thread. */
TR_API int tr_object_create(tr_runtime *rt, size_t len, tr_ref *out, void **buf);

/* Seals an object made by tr_object_create in this process: it becomes immutable and
 * visible. Returns 0, TR_ENOTFOUND, TR_ESTATE (sealed already). Thread safety: any thread. */
TR_API int tr_object_seal(tr_runtime *rt, tr_ref ref);

typedef struct tr_store_stats {
    uint32_t struct_size;   /* TR_STRUCT_SIZE(tr_store_stats) */
    uint64_t capacity;      /* largest object that fits in an empty store */
    uint64_t bytes_used;    /* allocated, headers included */
    uint64_t bytes_objects; /* sealed objects' bytes */
    uint64_t n_objects;     /* objects, sealed or being written, resident or spilled */
    uint64_t bytes_spilled; /* objects' bytes now on disk */
    uint64_t spills;        /* objects written to disk so far */
    uint64_t restores;      /* objects read back so far */
} tr_store_stats;

#define TR_STORE_STATS_INIT                                                                        \
    { TR_STRUCT_SIZE(tr_store_stats), 0, 0, 0, 0, 0, 0, 0 }
/* Same as TR_STORE_STATS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_store_stats_init(tr_store_stats *stats);
/* Element types and reduction operators of the reduction routines (here and, later, the
 * collective groups). */
typedef enum tr_dtype {
    TR_INT8 = 0,
    TR_UINT8 = 1,
    TR_INT32 = 2,
    TR_INT64 = 3,
    TR_FLOAT16 = 4,
    TR_BFLOAT16 = 5,
    TR_FLOAT32 = 6,
    TR_FLOAT64 = 7,
} tr_dtype;

/* Reductions, in rank order on every backend (every rank gets the same bits). Integer sums
 * and products wrap (two's complement); TR_AVG sums in the dtype, then divides (integers
 * truncate toward zero), so an integer average of large values wraps first. float16 and
 * bfloat16 compute in float32 and round to nearest even at each step. */
typedef enum tr_redop {
    TR_SUM = 0,
    TR_PROD = 1,
    TR_MIN = 2,
    TR_MAX = 3,
    TR_AVG = 4,
} tr_redop;

/* Bytes of one element of dtype; 0 for an unknown dtype. Thread safety: any thread. */
TR_API size_t tr_dtype_size(tr_dtype dtype);

/* Allreduce through the object store - the path ray.put/ray.get users take, kept as the
 * baseline the collective path is measured against: each of `world` ranks (any processes
 * on this node, typically actors) puts its buffer, publishes the ref in the node's KV
 * store under `name`, gets every other rank's object (zero-copy), and reduces in rank
 * order, so every rank ends with the same bytes in buf. `round` must increase by one per
 * call on a name (0, 1, 2, ...). Returns 0, TR_EINVAL (bad arguments, or ranks disagree
 * on the size), TR_ETIMEDOUT (a rank did not arrive), TR_ENOMEM.
 * Thread safety: any thread; one call per (name, rank) at a time. */
TR_API int tr_object_allreduce(tr_runtime *rt, const char *name, int rank, int world,
                               uint64_t round, void *buf, size_t count, tr_dtype dtype, tr_redop op,
                               int timeout_ms);

/* ------------------------------------------------------------------ collective groups */

/* Joins a collective group: `world` ranks (any processes on the node, typically actors)
 * call this with the same name (1-199 bytes, no '/') and backend and their own rank; it returns
 * once all have joined (the rendezvous), or TR_ETIMEDOUT after timeout_ms. Backends: "shm" (ranks
 * on one node, through a pre-faulted shared segment), "gloo" (Gloo over TCP) and "auto"
 * (shm). Ranks on several nodes: tr_group_declare. Returns 0,
 * TR_EINVAL (bad arguments, a backend not in this build, or a group of that name with another world
 * or backend), TR_EEXIST (the rank is taken), TR_ETIMEDOUT, TR_ECONNECT. Thread safety: any thread.
 */
TR_API int tr_group_join(tr_runtime *rt, int world, int rank, const char *backend, const char *name,
                         int timeout_ms, tr_group **out);
/* Deprecated (0.2's names, kept for binaries built against them): tr_group_join,
 * tr_group_join_multigpu. "_init" fills a struct with defaults; a group is joined. */
TR_API int tr_group_init(tr_runtime *rt, int world, int rank, const char *backend, const char *name,
                         int timeout_ms, tr_group **out);
TR_API int tr_group_init_multigpu(tr_runtime *rt, int world, int rank, const int *devices, int ndev,
                                  const char *name, int timeout_ms, tr_group **out);
/* Declares, from the driver, a group over actors (as Ray's declare_collective_group):
 * actors[i] gets ranks[i] (ranks NULL: i). Each actor then joins with tr_group_open on
 * first use. The actors may be on several nodes of a cluster (docs/CLUSTER.md): backend
 * "gloo", "hier" (allreduce in two levels: shm in each node, Gloo between nodes) or
 * "auto" ("shm" on one node; across nodes "hier" where a node has several ranks, else
 * "gloo"). Returns 0, TR_EINVAL (ranks not a permutation, bad name, "shm" or "nccl"
 * across nodes), TR_ECONNECT (the head out of reach). Thread safety: any thread. */
TR_API int tr_group_declare(tr_runtime *rt, const tr_actor_id *actors, size_t n, const int *ranks,
                            const char *backend, const char *name);
/* Inside an actor's method: joins the group declared under name, as this actor's rank,
 * waiting up to timeout_ms for the declaration and the other ranks. Returns as
 * tr_group_join, and TR_ESTATE outside an actor, TR_ENOTFOUND if this actor is not a
 * member. Thread safety: any thread. */
TR_API int tr_group_open(tr_runtime *rt, const char *name, int timeout_ms, tr_group **out);
/* Whether a group is declared under name now (tr_group_declare; no wait): 1, 0, or a
 * negative code (TR_EINVAL, TR_ECONNECT). For bindings that, as Ray's collective library,
 * fail at once an op on a group nobody declared. Thread safety: any thread. */
TR_API int tr_group_is_declared(tr_runtime *rt, const char *name);
/* The handle of group `name` that this process joined (tr_group_join or tr_group_open)
 * and has not destroyed, as Ray's ops find a group by its name: a method can run ops on a
 * group that another method of the actor joined. *out is borrowed: it stays valid until
 * tr_group_destroy on it (do not destroy a group another thread may be looking up).
 * Returns 0, TR_EINVAL, TR_ENOTFOUND. Thread safety: any thread. */
TR_API int tr_group_get(tr_runtime *rt, const char *name, tr_group **out);
/* Leaves the group and frees the handle (either way); NULL is a no-op. Returns 0, or the
 * error of telling the node (TR_ECONNECT, TR_ETIMEDOUT: the node learns of it anyway when
 * the group's own connection closes), as tr_dag_destroy reports its teardown's.
 * Thread safety: not with the group's ops, nor with a tr_group_get of it. (Returned void
 * before 0.3: binaries built then ignore the value.) */
TR_API int tr_group_destroy(tr_group *g);
/* The group's rank of this process, and its number of ranks; TR_EINVAL for NULL.
 * Thread safety: any thread (both are fixed when the group is joined). */
TR_API int tr_group_rank(const tr_group *g);
TR_API int tr_group_size(const tr_group *g);
/* 1 if this process has joined group `name` (and not destroyed it), else 0 (as Ray's
 * is_group_initialized). Thread safety: any thread. */
TR_API int tr_group_is_initialized(tr_runtime *rt, const char *name);
/* An op's timeout_ms of TR_GROUP_TIMEOUT means the group's default: 60 s until
 * tr_group_set_timeout changes it (ms, or TR_FOREVER). Returns 0, TR_EINVAL. Thread
 * safety: not with the group's ops. */
#define TR_GROUP_TIMEOUT (-2)
TR_API int tr_group_set_timeout(tr_group *g, int timeout_ms);
/* Before each op, ranks check that they all called the same op with the same count,
 * dtype, reduction op and root (on by default). On gloo the check rides on the op: no
 * rank waits for it, but one that arrives before the last copies its output aside while
 * it waits for it (an output over 4 MiB waits instead), so that a disagreement leaves
 * every buffer as it was; that costs nothing measurable up to 4 KiB. on = 0 skips it
 * where a backend can, as MPI and NCCL never check: ranks that disagree then get
 * corrupted data, or an error at the timeout. Every rank of the group must choose the
 * same. Returns 0, TR_EINVAL.
 * Thread safety: not with the group's ops. */
TR_API int tr_group_set_checks(tr_group *g, int on);
/* shm: allreduce, broadcast, allgather, gather and scatter of 64 KiB or more can read the
 * data straight from the owner's buffer in its own memory (process_vm_readv: one copy
 * instead of two through shared memory) where every rank can (the same user; a Yama ptrace
 * scope or a seccomp filter may forbid it) and has a core of its own. Whether that is
 * faster depends on the machine, and on where its cores sit at the moment: the two copies
 * through shared memory overlap, but cross the cores' caches. on = -1 (the default): the
 * faster way for each op and size, timed as the group runs (each way first tried twice,
 * the slower tried again once in 32 ops); 1: wherever allowed; 0: never (an op uses it
 * only where no rank has it off). Other backends ignore it. Returns 0, TR_EINVAL.
 * Thread safety: not with the group's ops. */
TR_API int tr_group_set_single_copy(tr_group *g, int on);

/* Collective ops: every rank of the group calls the same op with the same count, dtype,
 * op and root, in the same order. Each waits at most timeout_ms (or the group's default:
 * TR_GROUP_TIMEOUT; below TR_FOREVER is TR_EINVAL). A dead rank gives
 * TR_EPEER_DIED and a timeout TR_ETIMEDOUT on every live rank, and leave the group
 * unusable (later ops return the same error; outputs are then undefined); ranks that
 * disagree on the arguments all get TR_EINVAL naming the difference, the group stays
 * usable, and every buffer of that op is left as it was on every rank (send, recv, an
 * in-place buffer, broadcast's buffer), so a caller may reuse them as they are. In place
 * when send == recv. Thread safety: one op at a time per group. */
TR_API int tr_barrier(tr_group *g, int timeout_ms);
TR_API int tr_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        tr_redop op, int timeout_ms);
TR_API int tr_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                        int timeout_ms);
/* recv (count elements) matters at root only, and may be NULL elsewhere. */
TR_API int tr_reduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     tr_redop op, int root, int timeout_ms);
/* recv holds world * count elements: rank j's count elements at j * count. */
TR_API int tr_allgather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        int timeout_ms);
/* As allgather into root's recv only (NULL elsewhere). */
TR_API int tr_gather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     int root, int timeout_ms);
/* root's send holds world * count elements; rank j receives send[j * count ..]. send may
 * be NULL off the root. */
TR_API int tr_scatter(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                      int root, int timeout_ms);
/* send holds world * count elements; rank j receives the reduction over all ranks of
 * their send[j * count ..] (count elements). */
TR_API int tr_reduce_scatter(tr_group *g, const void *send, void *recv, size_t count,
                             tr_dtype dtype, tr_redop op, int timeout_ms);
/* Point to point, in order per pair of ranks, and synchronous on both backends: tr_send
 * returns once the receiver has taken the message (shm), or once the receiver has posted
 * its tr_recv and the data is written to the connection (gloo, which sends nothing until
 * the receiver is ready). So a send with no matching receive waits, up to its timeout,
 * and two ranks that both send first deadlock until then. The receiver checks count and
 * dtype against what was sent: a difference is TR_EINVAL on the receiver (and on an shm
 * sender). */
TR_API int tr_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                   int timeout_ms);
TR_API int tr_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int timeout_ms);
/* send and recv hold world * count elements; rank r's recv[j * count ..] is rank j's
 * send[r * count ..]. */
TR_API int tr_alltoall(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                       int timeout_ms);

/* ------------------------------------------------------------------ GPUs (nccl) */

/* The "nccl" backend (in a troupe built with --config=cuda; elsewhere tr_group_join says
 * it is not built in): ranks are processes with a CUDA device each (the current device
 * as the rank joins; an actor created with num_gpus >= 1 sees its GPUs as 0, 1, ...), and
 * every op above takes device buffers. The join makes a non-blocking NCCL communicator
 * within the join's timeout; each op waits for the GPU with its own deadline, and a
 * timeout, a rank's death or an NCCL error aborts the communicator (ncclCommAbort), so
 * no rank hangs: every live rank gets TR_ETIMEDOUT or TR_EPEER_DIED, with NCCL's message.
 * The agreement check runs before NCCL moves a byte (send/recv: the receiver checks a
 * header). NCCL's reduction order is its own (floating-point results may differ from the
 * CPU backends' in the last bits); TR_AVG of signed integers is NCCL's sum, then a
 * division (truncating, as on the CPU backends: NCCL's own average is unsigned). A join in a
 * process that sees no GPU: TR_ERESOURCES. An op reads its inputs after what the caller enqueued on
 * the default stream (the group's stream is a blocking one); work on the caller's other streams
 * must finish first (or use the async form on that stream). In place: send == recv on every op
 * (NCCL's own layouts aside, an overlap costs a device copy of send). As NCCL requires, ops of two
 * nccl groups on one GPU must be issued in the same order by every process, and not from two
 * threads at once. On shm and gloo, in the CUDA build, device buffers work too: they are staged
 * through pinned host memory kept with the group (the copies are the cost). */

/* An nccl group whose process drives ndev local devices (devices: CUDA ordinals as this
 * process sees them, all different; 1..16): one NCCL rank per device, world * ndev in
 * all, for the _multigpu ops below (as Ray's allreduce_multigpu). Single-device ops work
 * on such a group only when ndev is 1. Returns as tr_group_join. Thread safety: any
 * thread. */
TR_API int tr_group_join_multigpu(tr_runtime *rt, int world, int rank, const int *devices, int ndev,
                                  const char *name, int timeout_ms, tr_group **out);
/* One buffer per device of this process (send[i], recv[i] on devices[i]); counts as in
 * the single-device ops, over world * ndev NCCL ranks: allgather's recv[i] holds
 * world * ndev * count elements, NCCL rank (rank * ndev + i)'s at that index * count;
 * reduce_scatter's send[i] likewise, and recv[i] gets that index's reduction. The root is
 * (root_rank, root_gpu: an index into that process's devices); reduce's recv matters at
 * the root device only. nccl groups only; TR_EINVAL elsewhere. Thread safety: as every op,
 * one op at a time per group (not with the group's other ops). */
TR_API int tr_allreduce_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, tr_redop op, int timeout_ms);
TR_API int tr_broadcast_multigpu(tr_group *g, void *const *bufs, size_t count, tr_dtype dtype,
                                 int root_rank, int root_gpu, int timeout_ms);
TR_API int tr_reduce_multigpu(tr_group *g, const void *const *send, void *const *recv, size_t count,
                              tr_dtype dtype, tr_redop op, int root_rank, int root_gpu,
                              int timeout_ms);
TR_API int tr_allgather_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, int timeout_ms);
TR_API int tr_reduce_scatter_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                      size_t count, tr_dtype dtype, tr_redop op, int timeout_ms);
/* The async form (single-device nccl groups): with a stream set (a cudaStream_t; NULL
 * goes back to waiting), each op runs the agreement check, enqueues on that stream and
 * returns; compute enqueued after it overlaps nothing it depends on. Each op keeps its
 * deadline: a watchdog thread aborts the communicator when one passes, a rank dies or
 * NCCL fails, so work waiting on the stream never hangs. tr_group_synchronize waits for
 * every op enqueued so far (0, or the failure, which leaves the group unusable); other
 * backends' ops have finished when they return, so there it returns 0 at once.
 * Returns 0, TR_EINVAL. Thread safety: not with the group's ops. */
TR_API int tr_group_set_stream(tr_group *g, void *stream);
TR_API int tr_group_synchronize(tr_group *g, int timeout_ms);

/* Usage of the node's object store (for leak checks and monitoring). Returns 0, TR_EINVAL.
 * Thread safety: any thread. */
TR_API int tr_object_stats(tr_runtime *rt, tr_store_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* TROUPE_TROUPE_H */
