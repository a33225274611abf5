/* troupe._fast - the two ends of a plain method call and of a plain task in C, beside the
 * ctypes binding.
 *
 * A call or a task from Python whose arguments are builtin scalars, and the worker's run
 * of a plain method of a sync actor or of a plain remote function, are most of what a Ray
 * program does; through ctypes each costs several microseconds of argument conversion,
 * callback thunks and Python frames on both sides of a ~1 us call ring. This module does
 * those paths with the CPython API, and nothing else: every case it does not take (refs,
 * buffers, options, generators, errors, async actors, graph steps) goes to the Python
 * code that has always handled it, and the payloads either writes mean the same values
 * to both (plain pickles: pickle's own opcodes). ObjectRef's fields live here too
 * (RefBase), so that a call's ref is made, got and let go with no Python code. The
 * package works without it (TROUPE_NO_EXTENSION=1, or an interpreter older than 3.11);
 * tests run both ways.
 *
 * libtroupe is not linked here: configure() gets the addresses of the functions it needs
 * from the library the package loaded with ctypes (so both use the same one), and the
 * Python objects the paths share (pickle's dumps and loads, the ref classes, the holds).
 * Built against the stable ABI of CPython 3.11 (one .abi3.so for 3.11 and later). */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "troupe/troupe.h"

/* The vectorcall protocol (PEP 590), by which the interpreter calls Remote and Get with
 * their arguments in place (no tuple made and freed per call). Part of the stable ABI
 * from 3.12; the same since 3.8 (the flag's bit, the __vectorcalloffset__ member that
 * PyType_FromSpec reads, the signature), which 3.11's limited API does not name. */
#ifndef Py_TPFLAGS_HAVE_VECTORCALL
#define Py_TPFLAGS_HAVE_VECTORCALL (1UL << 11)
#endif
#ifndef PY_VECTORCALL_ARGUMENTS_OFFSET
#define PY_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))
#endif
#if Py_LIMITED_API + 0 < 0x030C0000 /* (exported since 3.9; named by the limited API from 3.12) */
PyAPI_FUNC(PyObject *) PyObject_Vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                           PyObject *kwnames);
#endif
typedef PyObject *(*vcall_fn)(PyObject *, PyObject *const *, size_t, PyObject *);

/* A call's positional arguments: a tuple's, or (tuple NULL) a vector's. */
typedef struct {
    PyObject *tuple;
    PyObject *const *v;
    Py_ssize_t n;
} args_view;

static args_view tuple_args(PyObject *t) {
    args_view a = {t, NULL, PyTuple_Size(t)};
    return a;
}

static PyObject *arg_at(const args_view *a, Py_ssize_t i) { /* (borrowed) */
    return a->tuple != NULL ? PyTuple_GetItem(a->tuple, i) : a->v[i];
}

/* The arguments as a tuple (a new reference): prefix first where it is not NULL. */
static PyObject *args_tuple(PyObject *prefix, const args_view *a) {
    Py_ssize_t k = prefix != NULL;
    PyObject *t;

    if (k == 0 && a->tuple != NULL) {
        Py_INCREF(a->tuple);
        return a->tuple;
    }
    if ((t = PyTuple_New(a->n + k)) == NULL) return NULL;
    if (prefix != NULL) {
        Py_INCREF(prefix);
        PyTuple_SetItem(t, 0, prefix); /* (steals) */
    }
    for (Py_ssize_t i = 0; i < a->n; i++) {
        PyObject *x = arg_at(a, i);
        Py_INCREF(x);
        PyTuple_SetItem(t, i + k, x);
    }
    return t;
}

/* A vectorcall's arguments as a tuple and a dict (NULL where there are no keywords): new
 * references, 0; or -1 with an error set. */
static int vcall_split(PyObject *const *argv, size_t nargsf, PyObject *kwnames, PyObject **args,
                       PyObject **kwargs) {
    Py_ssize_t n = (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET);
    Py_ssize_t nk = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    args_view a = {NULL, argv, n};

    *kwargs = NULL;
    if ((*args = args_tuple(NULL, &a)) == NULL) return -1;
    if (nk == 0) return 0;
    if ((*kwargs = PyDict_New()) == NULL) goto fail;
    for (Py_ssize_t i = 0; i < nk; i++)
        if (PyDict_SetItem(*kwargs, PyTuple_GetItem(kwnames, i), argv[n + i]) < 0) goto fail;
    return 0;
fail:
    Py_CLEAR(*args);
    Py_CLEAR(*kwargs);
    return -1;
}

/* The library's functions, by address (configure). Their types are checked against the
 * header's declarations below. */
typedef int (*call_fn)(tr_runtime *, tr_actor_id, const char *, const void *, size_t, tr_ref *);
typedef int (*get_fn)(tr_runtime *, tr_ref, int, const void **, size_t *);
typedef const char *(*ctx_method_fn)(const tr_ctx *);
typedef void (*ctx_started_fn)(tr_ctx *);
typedef int (*ctx_reply_fn)(tr_ctx *, const void *, size_t);
typedef int (*release_fn)(tr_runtime *, tr_ref);
typedef size_t (*ctx_num_refs_fn)(const tr_ctx *);
typedef int (*ctx_ref_fn)(const tr_ctx *, size_t, const void **, size_t *);
typedef int (*task_submit_fn)(tr_runtime *, const char *, const void *, size_t, const tr_ref *,
                              size_t, const tr_task_options *, tr_ref *);

_Static_assert(__builtin_types_compatible_p(call_fn, __typeof__(&tr_call)), "tr_call");
_Static_assert(__builtin_types_compatible_p(call_fn, __typeof__(&tr_call_nowait)),
               "tr_call_nowait");
_Static_assert(__builtin_types_compatible_p(get_fn, __typeof__(&tr_get)), "tr_get");
_Static_assert(__builtin_types_compatible_p(ctx_method_fn, __typeof__(&tr_ctx_method)),
               "tr_ctx_method");
_Static_assert(__builtin_types_compatible_p(ctx_started_fn, __typeof__(&tr_ctx_started)),
               "tr_ctx_started");
_Static_assert(__builtin_types_compatible_p(ctx_reply_fn, __typeof__(&tr_ctx_reply)),
               "tr_ctx_reply");
_Static_assert(__builtin_types_compatible_p(release_fn, __typeof__(&tr_ref_release)),
               "tr_ref_release");
_Static_assert(__builtin_types_compatible_p(task_submit_fn, __typeof__(&tr_task_submit)),
               "tr_task_submit");
_Static_assert(__builtin_types_compatible_p(ctx_num_refs_fn, __typeof__(&tr_ctx_num_refs)),
               "tr_ctx_num_refs");
_Static_assert(__builtin_types_compatible_p(ctx_ref_fn, __typeof__(&tr_ctx_ref)), "tr_ctx_ref");

/* (Py_SETREF is not in the limited API) */
#define SETREF(dst, src)                                                                           \
    do {                                                                                           \
        PyObject *old_ = (PyObject *)(dst);                                                        \
        (dst) = (src);                                                                             \
        Py_XDECREF(old_);                                                                          \
    } while (0)

#define MAGIC0 "TRP0" /* a plain pickle follows: no out-of-band buffer (_serial.MAGIC0) */
#define MAGIC_LEN 4
#define STEP_PREFIX "_troupe_dag:" /* a compiled graph's step (dag.STEP_PREFIX) */
#define N_SIMPLE 7                 /* _serial.SIMPLE: int, float, str, bytes, bool, None, complex */
#define STACK_BYTES 4096           /* payloads up to this are framed on the stack */

static struct {
    int ready;
    call_fn call, call_nowait;
    get_fn get;
    ctx_method_fn ctx_method;
    ctx_started_fn ctx_started;
    ctx_reply_fn ctx_reply;
    release_fn release;
    task_submit_fn task_submit;
    ctx_num_refs_fn ctx_num_refs;
    ctx_ref_fn ctx_ref;
    tr_method_fn slow;     /* the ctypes dispatch: everything the fast path leaves */
    long etimedout;        /* TR_ETIMEDOUT */
    int slice_ms;          /* a wait with no timeout wakes this often (signals) */
    Py_ssize_t inline_max; /* larger arguments go through the object store */
    Py_ssize_t copy_max;   /* results up to this are decoded from one copy */
    PyObject *simple[N_SIMPLE];
    PyObject *dumps, *loads, *protocol;
    PyObject *ref_type, *object_ref_type, *holds;
    PyObject *base_type;      /* RefBase: ObjectRef's base here (its fields in C) */
    PyObject *not_taken;      /* get()'s answer where it takes the general path */
    PyObject *remote_general; /* ActorMethod's general remote(): (method, *args, **kw) */
    PyObject *decode;         /* (ref, address, n): a got value that is no plain pickle */
    PyObject *holds_lock;     /* _runtime._holds_lock: a HoldLock (below) */
    PyObject *rt_obj;         /* _runtime._rt (set_runtime; NULL: None) ... */
    void *rtp;                /* ...and its pointer */
    PyObject *call_failed;    /* (rc, class name, method) raises the call's error */
    PyObject *submit_failed;  /* (rc, function name) raises the task submit's error */
    /* the worker's side (worker_configure) */
    PyObject *state;          /* _worker's state dict: "instance" */
    PyObject *methods;        /* name -> True: plain methods of a sync actor */
    PyObject *arg_ref;        /* _serial.ArgRef */
    PyObject *resolve;        /* (ctx, a, kw) -> (a, kw) with ArgRefs resolved */
    PyObject *finish;         /* (ctx, result) -> rc: a result not replied here */
    PyObject *failed;         /* (ctx, exc) -> rc: a method's exception */
    tr_task_fn task_slow;     /* the ctypes task dispatch: every task the fast path leaves */
    PyObject *tasks;          /* digest (bytes) -> function: the plain tasks' functions */
    PyObject *running;        /* _worker._running_task: [ctx] of the main thread's task */
    PyObject *task_finish;    /* (ctx, result, rc) -> rc: a task's result not replied here */
    PyObject *task_failed;    /* (ctx, exc) -> rc: a task's exception */
    unsigned long main_ident; /* the worker's main thread (troupe.cancel's signal runs there) */
    PyObject *steps;          /* a graph step's method name -> (method, spec): the plain ones */
    PyObject *step_args;      /* (spec, values) -> (args, kwargs): a step's call (_worker's) */
    PyObject *s_instance;
    int exit_requested; /* _runtime.exit_requested (set_exit_requested) */
} F;

static PyObject *hold_lock_type; /* HoldLock (the refs' section) */

static int is_simple(PyObject *x) {
    PyObject *t = (PyObject *)Py_TYPE(x);
    for (int i = 0; i < N_SIMPLE; i++)
        if (t == F.simple[i]) return 1;
    return 0;
}

/* The 8 bytes of a ctypes c_void_p (the runtime), or the 16 of an id, into out. */
static int ctypes_bytes(PyObject *obj, void *out, Py_ssize_t n) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return -1;
    int ok = view.len == n;
    if (ok) memcpy(out, view.buf, (size_t)n);
    PyBuffer_Release(&view);
    if (!ok) PyErr_Format(PyExc_TypeError, "troupe._fast: %zd bytes expected", n);
    return ok ? 0 : -1;
}

static PyObject *get_addr(PyObject *addrs, const char *name, void **out) {
    PyObject *v = PyDict_GetItemString(addrs, name); /* borrowed */
    if (v == NULL) return PyErr_Format(PyExc_KeyError, "troupe._fast: no address of %s", name);
    *out = PyLong_AsVoidPtr(v);
    return *out == NULL ? PyErr_Format(PyExc_ValueError, "troupe._fast: %s is NULL", name)
                        : Py_None;
}

static PyObject *get_obj(PyObject *objs, const char *name, PyObject **out) {
    PyObject *v = PyDict_GetItemString(objs, name); /* borrowed */
    if (v == NULL) return PyErr_Format(PyExc_KeyError, "troupe._fast: no %s", name);
    Py_INCREF(v);
    SETREF(*out, v);
    return Py_None;
}

/* configure(addrs, objs): the library's functions by address (ints), and the package's
 * objects the paths share. Called once per process by _runtime before the first call. */
static PyObject *fast_configure(PyObject *self, PyObject *args) {
    PyObject *addrs, *objs, *simple;
    void *p;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &addrs, &PyDict_Type, &objs)) return NULL;
    if (!get_addr(addrs, "tr_call", &p)) return NULL;
    F.call = (call_fn)p;
    if (!get_addr(addrs, "tr_call_nowait", &p)) return NULL;
    F.call_nowait = (call_fn)p;
    if (!get_addr(addrs, "tr_get", &p)) return NULL;
    F.get = (get_fn)p;
    if (!get_addr(addrs, "tr_ctx_method", &p)) return NULL;
    F.ctx_method = (ctx_method_fn)p;
    if (!get_addr(addrs, "tr_ctx_started", &p)) return NULL;
    F.ctx_started = (ctx_started_fn)p;
    if (!get_addr(addrs, "tr_ctx_reply", &p)) return NULL;
    F.ctx_reply = (ctx_reply_fn)p;
    if (!get_addr(addrs, "tr_ref_release", &p)) return NULL;
    F.release = (release_fn)p;
    if (!get_addr(addrs, "tr_task_submit", &p)) return NULL;
    F.task_submit = (task_submit_fn)p;
    if (!get_addr(addrs, "tr_ctx_num_refs", &p)) return NULL;
    F.ctx_num_refs = (ctx_num_refs_fn)p;
    if (!get_addr(addrs, "tr_ctx_ref", &p)) return NULL;
    F.ctx_ref = (ctx_ref_fn)p;
    if (!get_obj(objs, "dumps", &F.dumps) || !get_obj(objs, "loads", &F.loads) ||
        !get_obj(objs, "protocol", &F.protocol) || !get_obj(objs, "Ref", &F.ref_type) ||
        !get_obj(objs, "ObjectRef", &F.object_ref_type) ||
        !get_obj(objs, "not_taken", &F.not_taken) || !get_obj(objs, "holds", &F.holds) ||
        !get_obj(objs, "remote_general", &F.remote_general) ||
        !get_obj(objs, "decode", &F.decode) || !get_obj(objs, "holds_lock", &F.holds_lock) ||
        !get_obj(objs, "call_failed", &F.call_failed) ||
        !get_obj(objs, "submit_failed", &F.submit_failed))
        return NULL;
    if (!PyObject_TypeCheck(F.holds_lock, (PyTypeObject *)hold_lock_type))
        return PyErr_Format(PyExc_TypeError, "troupe._fast: the holds' lock is no HoldLock");
    if (F.base_type == NULL || !PyType_Check(F.object_ref_type) ||
        PyObject_IsSubclass(F.object_ref_type, F.base_type) != 1)
        return PyErr_Occurred()
                   ? NULL
                   : PyErr_Format(PyExc_TypeError, "troupe._fast: ObjectRef is no RefBase");
    simple = PyDict_GetItemString(objs, "simple");
    if (simple == NULL || !PyTuple_Check(simple) || PyTuple_Size(simple) != N_SIMPLE)
        return PyErr_Format(PyExc_ValueError, "troupe._fast: simple: %d types", N_SIMPLE);
    for (int i = 0; i < N_SIMPLE; i++) {
        PyObject *t = PyTuple_GetItem(simple, i);
        Py_INCREF(t);
        SETREF(F.simple[i], t);
    }
    F.etimedout = PyLong_AsLong(PyDict_GetItemString(objs, "etimedout"));
    F.slice_ms = (int)PyLong_AsLong(PyDict_GetItemString(objs, "slice_ms"));
    F.inline_max = PyLong_AsSsize_t(PyDict_GetItemString(objs, "inline_max"));
    F.copy_max = PyLong_AsSsize_t(PyDict_GetItemString(objs, "copy_max"));
    if (PyErr_Occurred()) return NULL;
    if (F.s_instance == NULL && (F.s_instance = PyUnicode_InternFromString("instance")) == NULL)
        return NULL;
    F.ready = 1;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ plain pickles */

/* A call's (args, kwargs) of builtin scalars, and a scalar result, are written here as
 * pickle protocol 5 opcodes (what pickle.loads reads; no frame, no memo), and payloads
 * made of such opcodes (pickle's own for them adds FRAME and MEMOIZE, read too) are read
 * here: pickle.dumps starts each pickle in a 4 KiB buffer, and both calls cost more than
 * a call ring's round trip. Whatever is not such (an int over 64 bits, a str with lone
 * surrogates, a complex, any other opcode) goes to pickle itself: either's bytes mean
 * the same values to both. */

#define P_MARK 0x28           /* '(' */
#define P_STOP 0x2e           /* '.' */
#define P_BININT 0x4a         /* 'J' */
#define P_BININT1 0x4b        /* 'K' */
#define P_BININT2 0x4d        /* 'M' */
#define P_NONE 0x4e           /* 'N' */
#define P_BINFLOAT 0x47       /* 'G' */
#define P_BINBYTES 0x42       /* 'B' */
#define P_SHORT_BINBYTES 0x43 /* 'C' */
#define P_BINUNICODE 0x58     /* 'X' */
#define P_EMPTY_TUPLE 0x29    /* ')' */
#define P_TUPLE 0x74          /* 't' */
#define P_EMPTY_DICT 0x7d     /* '}' */
#define P_SETITEM 0x73        /* 's' */
#define P_SETITEMS 0x75       /* 'u' */
#define P_PROTO 0x80
#define P_TUPLE1 0x85
#define P_TUPLE2 0x86
#define P_TUPLE3 0x87
#define P_NEWTRUE 0x88
#define P_NEWFALSE 0x89
#define P_LONG1 0x8a
#define P_SHORT_BINUNICODE 0x8c
#define P_BINUNICODE8 0x8d
#define P_BINBYTES8 0x8e
#define P_MEMOIZE 0x94
#define P_FRAME 0x95

/* An output buffer: a caller's stack buffer first, the heap once that is full. */
typedef struct {
    char *p, *heap;
    size_t len, cap;
} wbuf;

/* w_put's growth: the heap buffer made or made larger for n more bytes. 0, or -1 with
 * MemoryError set. */
static int w_grow(wbuf *w, size_t n) {
    size_t cap = 2 * (w->len + n);
    char *q = realloc(w->heap, cap);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (w->heap == NULL) memcpy(q, w->p, w->len);
    w->p = w->heap = q, w->cap = cap;
    return 0;
}

/* (inline: the opcodes' puts of 1-9 bytes become stores) */
static inline int w_put(wbuf *w, const void *src, size_t n) {
    if (w->len + n > w->cap && w_grow(w, n) < 0) return -1;
    memcpy(w->p + w->len, src, n);
    w->len += n;
    return 0;
}

static inline int w_op(wbuf *w, int op) {
    unsigned char b = (unsigned char)op;
    return w_put(w, &b, 1);
}

/* op, then n as a little-endian integer of width bytes */
static inline int w_op_le(wbuf *w, int op, uint64_t n, int width) {
    unsigned char b[9];
    b[0] = (unsigned char)op;
    for (int i = 0; i < width; i++)
        b[1 + i] = (unsigned char)(n >> (8 * i));
    return w_put(w, b, 1 + (size_t)width);
}

/* A sized string (str's UTF-8 or bytes) with the opcode of its size. */
static int w_sized(wbuf *w, const char *s, size_t n, int op1, int op4, int op8) {
    if (n < 256            ? w_op_le(w, op1, n, 1)
        : n <= 0xffffffffu ? w_op_le(w, op4, n, 4)
                           : w_op_le(w, op8, n, 8))
        return -1;
    return w_put(w, s, n);
}

/* One builtin scalar. 1 written, 0 not one this writes (nothing written), -1 error. */
static int enc_value(wbuf *w, PyObject *v) {
    PyObject *t = (PyObject *)Py_TYPE(v);
    const char *s;
    Py_ssize_t n;

    if (v == Py_None) return w_op(w, P_NONE) ? -1 : 1;
    if (v == Py_True || v == Py_False)
        return w_op(w, v == Py_True ? P_NEWTRUE : P_NEWFALSE) ? -1 : 1;
    if (t == (PyObject *)&PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) return 0;
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x >= 0 && x < 256) return w_op_le(w, P_BININT1, (uint64_t)x, 1) ? -1 : 1;
        if (x >= 0 && x < 65536) return w_op_le(w, P_BININT2, (uint64_t)x, 2) ? -1 : 1;
        if (x >= INT32_MIN && x <= INT32_MAX)
            return w_op_le(w, P_BININT, (uint64_t)(uint32_t)(int32_t)x, 4) ? -1 : 1;
        unsigned char b[10] = {(unsigned char)P_LONG1, 8}; /* (8 bytes, two's complement) */
        for (int i = 0; i < 8; i++)
            b[2 + i] = (unsigned char)((uint64_t)x >> (8 * i));
        return w_put(w, b, sizeof b) ? -1 : 1;
    }
    if (t == (PyObject *)&PyFloat_Type) {
        double d = PyFloat_AsDouble(v);
        uint64_t bits;
        unsigned char b[9];
        memcpy(&bits, &d, 8);
        b[0] = (unsigned char)P_BINFLOAT;
        for (int i = 0; i < 8; i++) /* (big-endian) */
            b[1 + i] = (unsigned char)(bits >> (56 - 8 * i));
        return w_put(w, b, 9) ? -1 : 1;
    }
    if (t == (PyObject *)&PyUnicode_Type) {
        if ((s = PyUnicode_AsUTF8AndSize(v, &n)) == NULL) { /* (lone surrogates: pickle's) */
            PyErr_Clear();
            return 0;
        }
        return w_sized(w, s, (size_t)n, P_SHORT_BINUNICODE, P_BINUNICODE, P_BINUNICODE8) ? -1 : 1;
    }
    if (t == (PyObject *)&PyBytes_Type) {
        if (PyBytes_AsStringAndSize(v, (char **)&s, &n) < 0) return -1;
        return w_sized(w, s, (size_t)n, P_SHORT_BINBYTES, P_BINBYTES, P_BINBYTES8) ? -1 : 1;
    }
    return 0;
}

/* PROTO 5, then (args, kwargs) (builtin scalars; kwargs a dict, or NULL: none),
 * STOP. 1 written, 0 not all are scalars this writes, -1 error. */
static int enc_args(wbuf *w, const args_view *args, PyObject *kwargs) {
    Py_ssize_t n = args->n, pos = 0;
    PyObject *k, *v;
    int r;

    if (w_op_le(w, P_PROTO, 5, 1)) return -1;
    if (n == 0) {
        if (w_op(w, P_EMPTY_TUPLE)) return -1;
    } else {
        if (n > 3 && w_op(w, P_MARK)) return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if ((r = enc_value(w, arg_at(args, i))) <= 0) return r;
        if (w_op(w, n == 1 ? P_TUPLE1 : n == 2 ? P_TUPLE2 : n == 3 ? P_TUPLE3 : P_TUPLE)) return -1;
    }
    if (w_op(w, P_EMPTY_DICT)) return -1;
    if (kwargs != NULL && PyDict_Size(kwargs) > 0) {
        if (w_op(w, P_MARK)) return -1;
        while (PyDict_Next(kwargs, &pos, &k, &v))
            if ((r = enc_value(w, k)) <= 0 || (r = enc_value(w, v)) <= 0) return r;
        if (w_op(w, P_SETITEMS)) return -1;
    }
    return w_op(w, P_TUPLE2) || w_op(w, P_STOP) ? -1 : 1;
}

/* PROTO 5, a scalar, STOP: 1, 0, -1 as enc_args. */
static int enc_result(wbuf *w, PyObject *v) {
    int r;
    if (w_op_le(w, P_PROTO, 5, 1)) return -1;
    if ((r = enc_value(w, v)) <= 0) return r;
    return w_op(w, P_STOP) ? -1 : 1;
}

#define DEC_DEPTH 64 /* values on the reader's stack */
#define DEC_MARKS 8  /* marks open at once */

static uint64_t le(const unsigned char *p, int width) {
    uint64_t n = 0;
    for (int i = 0; i < width; i++)
        n |= (uint64_t)p[i] << (8 * i);
    return n;
}

/* The scalar of opcode op whose operand starts at *pp (before end): 1 with *out (a new
 * reference) and *pp past it, 0 where it is cut or not read here (no scalar's opcode, a
 * long over 8 bytes), -1 with a Python error set. */
static int dec_scalar(unsigned char op, const unsigned char **pp, const unsigned char *end,
                      PyObject **out) {
    const unsigned char *p = *pp;
    size_t len = 0;
    int width;
    PyObject *v;

#define SCALAR_NEED(k)                                                                             \
    do {                                                                                           \
        if ((size_t)(end - p) < (size_t)(k)) return 0;                                             \
    } while (0)
    switch (op) {
    case P_NONE:
        Py_INCREF(Py_None);
        v = Py_None;
        break;
    case P_NEWTRUE:
    case P_NEWFALSE:
        v = PyBool_FromLong(op == P_NEWTRUE);
        break;
    case P_BININT1:
    case P_BININT2:
    case P_BININT:
        width = op == P_BININT1 ? 1 : op == P_BININT2 ? 2 : 4;
        SCALAR_NEED(width);
        v = PyLong_FromLong(width == 4 ? (long)(int32_t)(uint32_t)le(p, 4) : (long)le(p, width));
        p += width;
        break;
    case P_LONG1: {
        SCALAR_NEED(1);
        len = p[0];
        if (len == 0 || len > 8) return 0;
        SCALAR_NEED(1 + len);
        uint64_t x = le(p + 1, (int)len);
        if (len < 8 && (x >> (8 * len - 1)) & 1) x |= ~(uint64_t)0 << (8 * len); /* sign */
        v = PyLong_FromLongLong((long long)x);
        p += 1 + len;
        break;
    }
    case P_BINFLOAT: {
        SCALAR_NEED(8);
        uint64_t bits = 0;
        double d;
        for (int i = 0; i < 8; i++)
            bits = bits << 8 | p[i];
        memcpy(&d, &bits, 8);
        v = PyFloat_FromDouble(d);
        p += 8;
        break;
    }
    case P_SHORT_BINUNICODE:
    case P_BINUNICODE:
    case P_BINUNICODE8:
    case P_SHORT_BINBYTES:
    case P_BINBYTES:
    case P_BINBYTES8:
        width = op == P_SHORT_BINUNICODE || op == P_SHORT_BINBYTES ? 1
                : op == P_BINUNICODE || op == P_BINBYTES           ? 4
                                                                   : 8;
        SCALAR_NEED(width);
        len = (size_t)le(p, width);
        p += width;
        if (len > (size_t)(end - p)) return 0;
        if (op == P_SHORT_BINBYTES || op == P_BINBYTES || op == P_BINBYTES8)
            v = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)len);
        else
            v = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)len, "surrogatepass");
        p += len;
        break;
    default:
        return 0;
    }
#undef SCALAR_NEED
    if (v == NULL) return -1;
    *pp = p;
    *out = v;
    return 1;
}

/* The value of a pickle made of the opcodes above (a new reference, *out); 1 read, 0
 * not such a pickle (pickle.loads is to read it), -1 error (a malformed one's is
 * pickle's to word: 0). */
static int dec_pickle(const unsigned char *p, size_t n, PyObject **out) {
    PyObject *stack[DEC_DEPTH], *v;
    size_t marks[DEC_MARKS];
    const unsigned char *end = p + n;
    int sp = 0, mp = 0, r = 0, got;

#define NEED(k)                                                                                    \
    do {                                                                                           \
        if ((size_t)(end - p) < (size_t)(k)) goto unread;                                          \
    } while (0)
#define PUSH(x)                                                                                    \
    do {                                                                                           \
        if ((v = (x)) == NULL) goto error;                                                         \
        if (sp >= DEC_DEPTH) {                                                                     \
            Py_DECREF(v);                                                                          \
            goto unread;                                                                           \
        }                                                                                          \
        stack[sp++] = v;                                                                           \
    } while (0)

    if (n < 3 || p[0] != (unsigned char)P_PROTO || p[1] < 2 || p[1] > 5) return 0;
    p += 2;
    while (p < end) {
        unsigned char op = *p++;
        switch (op) {
        case P_FRAME: /* (pickle's check: the frame is in the payload) */
            NEED(8);
            if (le(p, 8) > (uint64_t)(end - p - 8)) goto unread;
            p += 8;
            break;
        case P_MEMOIZE: /* (nothing here reads the memo back; pickle's check: a value) */
            if (sp <= (mp > 0 ? (int)marks[mp - 1] : 0)) goto unread;
            break;
        case P_EMPTY_TUPLE:
            PUSH(PyTuple_New(0));
            break;
        case P_TUPLE1:
        case P_TUPLE2:
        case P_TUPLE3:
        case P_TUPLE: {
            int from;
            if (op == P_TUPLE) {
                if (mp == 0) goto unread;
                from = (int)marks[--mp];
            } else {
                from = sp - (op - P_TUPLE1 + 1);
            }
            if (from < (mp > 0 ? (int)marks[mp - 1] : 0) || from > sp ||
                (from == sp && sp >= DEC_DEPTH)) /* (an empty tuple pushed: room for it) */
                goto unread;
            PyObject *t = PyTuple_New(sp - from);
            if (t == NULL) goto error;
            for (int i = from; i < sp; i++)
                PyTuple_SetItem(t, i - from, stack[i]); /* (steals) */
            sp = from;
            stack[sp++] = t;
            break;
        }
        case P_EMPTY_DICT:
            PUSH(PyDict_New());
            break;
        case P_MARK:
            if (mp == DEC_MARKS) goto unread;
            marks[mp++] = (size_t)sp;
            break;
        case P_SETITEM:
        case P_SETITEMS: {
            int from = op == P_SETITEM ? sp - 2 : mp > 0 ? (int)marks[--mp] : -1;
            if (from < (mp > 0 ? (int)marks[mp - 1] : 0) + 1 || from > sp || (sp - from) % 2 != 0 ||
                !PyDict_Check(stack[from - 1]))
                goto unread;
            for (int i = from; i < sp; i += 2)
                if (PyDict_SetItem(stack[from - 1], stack[i], stack[i + 1]) < 0) goto error;
            while (sp > from)
                Py_DECREF(stack[--sp]);
            break;
        }
        case P_STOP:
            if (sp != 1 || mp != 0 || p != end) goto unread;
            *out = stack[0];
            return 1;
        default: /* a scalar, or nothing read here */
            if ((got = dec_scalar(op, &p, end, &v)) <= 0) {
                if (got < 0) goto error;
                goto unread;
            }
            PUSH(v);
            break;
        }
    }
    goto unread; /* (no STOP) */
error:           /* (but for memory, pickle.loads is to say what is wrong: it reads it again) */
    r = PyErr_ExceptionMatches(PyExc_MemoryError) ? -1 : 0;
unread:
    while (sp > 0)
        Py_DECREF(stack[--sp]);
    if (r == 0) PyErr_Clear();
    return r;
#undef NEED
#undef PUSH
}

/* The value of a plain pickle (MAGIC0 stripped) at data, which stays valid meanwhile:
 * read here, or by pickle.loads through a view of it that is released before this
 * returns (nothing may read the memory after). A new reference, or NULL with a Python
 * error set. */
static PyObject *load_plain(const void *data, size_t n) {
    PyObject *v = NULL, *view, *r, *type, *value, *tb;
    int got = dec_pickle(data, n, &v);

    if (got != 0) return got > 0 ? v : NULL;
    view = PyMemoryView_FromMemory((char *)data, (Py_ssize_t)n, PyBUF_READ);
    if (view == NULL) return NULL;
    v = PyObject_CallFunctionObjArgs(F.loads, view, NULL);
    PyErr_Fetch(&type, &value, &tb); /* (loads' error kept aside while the view goes) */
    if ((r = PyObject_CallMethod(view, "release", NULL)) == NULL) {
        Py_CLEAR(v);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(type, value, tb);
    }
    Py_XDECREF(r);
    Py_DECREF(view);
    return v;
}

/* _write_plain(args, kwargs): the pickle this module writes of a call's arguments of
 * builtin scalars (bytes), or None where it leaves them to pickle (tests). */
static PyObject *fast_write_plain(PyObject *self, PyObject *args) {
    PyObject *a, *kw, *out = NULL;
    char buf[STACK_BYTES];
    wbuf w = {buf, NULL, 0, sizeof buf};
    int r;
    (void)self;

    if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &a, &PyDict_Type, &kw)) return NULL;
    args_view av = tuple_args(a);
    if ((r = enc_args(&w, &av, kw)) > 0)
        out = PyBytes_FromStringAndSize(w.p, (Py_ssize_t)w.len);
    else if (r == 0)
        out = Py_None, Py_INCREF(out);
    free(w.heap);
    return out;
}

/* _read_plain(data): (True, value) where this module reads the pickle itself, (False,
 * None) where it leaves it to pickle.loads (tests). */
static PyObject *fast_read_plain(PyObject *self, PyObject *data) {
    Py_buffer view;
    PyObject *v = NULL;
    int r;
    (void)self;

    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    r = dec_pickle(view.buf, (size_t)view.len, &v);
    PyBuffer_Release(&view);
    if (r < 0) return NULL;
    if (r == 0) return Py_BuildValue("(OO)", Py_False, Py_None);
    return Py_BuildValue("(ON)", Py_True, v);
}

/* ------------------------------------------------------------------ refs */

/* ObjectRef's fields in C (RefBase: _runtime.ObjectRef's base where this module is used,
 * _runtime._PyRefBase's slots otherwise): the id, the runtime it was made or got under
 * (_runtime._rt then, NULL for None) and whether it counts in this process's hold of its
 * id (_runtime._holds: id -> [count, rt]). A ref that counts gives its count back as it
 * goes (ref_dealloc), the last one the C hold, as _PyRefBase.__del__ does. */
typedef struct {
    PyObject_HEAD tr_ref id;
    PyObject *rt;
    PyObject *weakrefs;
    char owned;
    char made;       /* a call's or task's result this process made here (fresh_ref) */
    char registered; /* made, and counted in _holds: its id has left this object (_c) */
    char small;      /* its value was got here, a plain payload of up to PEND_SMALL bytes */
} RefObject;

#define REF(o) ((RefObject *)(o))

static int is_ref(PyObject *o) {
    return F.base_type != NULL && PyObject_TypeCheck(o, (PyTypeObject *)F.base_type);
}

/* Releases put off (the GIL guards them). A made ref whose small value was got here
 * (a sync call's: `troupe.get(a.f.remote(x))`) goes in its dealloc, between the get's
 * return and the next call, where its tr_ref_release (the library's lock, the call's slot
 * freed) and a GIL round cost a sync call ~60 ns here; it is put off to this process's
 * next wait (or submit that lets the GIL go) through this module, into the window where
 * the GIL is let go anyway and its reply is awaited (or the call's bytes travel)
 * (pend_take, pend_release),
 * or to the _runtime path's next use of the runtime (flush), or done at once when
 * PEND_MAX wait. What waits holds a slot of <= PEND_SMALL bytes each, nothing in the
 * store. Those of a runtime that is no longer _runtime._rt are dropped (it freed them). */
#define PEND_MAX 32
#define PEND_SMALL 4096
static tr_ref pend[PEND_MAX];
static size_t n_pend;

/* set_runtime(rt): _runtime._rt is now rt (a c_void_p, or None); _runtime._set_rt says
 * so each time it changes. (Read from the module's dict on each use, it cost a sync call
 * ~20 ns here: 3 lookups.) The releases put off for the one before are dropped: it
 * freed them, or will. */
static PyObject *fast_set_runtime(PyObject *self, PyObject *rt) {
    void *p = NULL;
    (void)self;

    if (rt != Py_None && ctypes_bytes(rt, &p, sizeof p) < 0) return NULL;
    n_pend = 0;
    if (rt == Py_None) {
        Py_CLEAR(F.rt_obj);
    } else {
        Py_INCREF(rt);
        SETREF(F.rt_obj, rt);
    }
    F.rtp = p;
    Py_RETURN_NONE;
}

/* The runtime this process runs now (_runtime._rt, as set_runtime was told): 1 with *rt
 * (borrowed: F keeps it) and its pointer *rtp, 0 where there is none. */
static int current_runtime(PyObject **rt, void **rtp) {
    if (F.rt_obj == NULL) return 0;
    *rt = F.rt_obj, *rtp = F.rtp;
    return 1;
}

/* HoldLock: _runtime._holds_lock where this module is used, a reentrant lock (a ref may
 * go, and give its hold back, in a finalizer that runs under it) that the C code here
 * takes without a Python call. Its fields are only touched with the GIL held; the lock
 * itself is waited for without it. */
typedef struct {
    PyObject_HEAD PyThread_type_lock lock;
    unsigned long owner;
    long count;
} HoldLockObject;

static int hl_acquire(HoldLockObject *l) {
    unsigned long me = PyThread_get_thread_ident();

    if (l->count > 0 && l->owner == me) {
        l->count++;
        return 0;
    }
    if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(l->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    l->owner = me, l->count = 1;
    return 0;
}

static int hl_release(HoldLockObject *l) {
    if (l->count == 0 || l->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--l->count == 0) {
        l->owner = 0;
        PyThread_release_lock(l->lock);
    }
    return 0;
}

static PyObject *hl_py_acquire(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    (void)argv, (void)argc; /* (blocking, timeout: it always waits, as the holds' users do) */
    hl_acquire((HoldLockObject *)self);
    Py_RETURN_TRUE;
}

static PyObject *hl_py_release(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    (void)argv, (void)argc;
    if (hl_release((HoldLockObject *)self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *hl_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs) {
    HoldLockObject *l;
    (void)args, (void)kwargs;

    if ((l = (HoldLockObject *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0)) == NULL)
        return NULL;
    if ((l->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(l);
        return PyErr_NoMemory();
    }
    return (PyObject *)l;
}

static void hl_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    HoldLockObject *l = (HoldLockObject *)self;

    if (l->lock != NULL) {
        if (l->count > 0) PyThread_release_lock(l->lock);
        PyThread_free_lock(l->lock);
    }
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static PyMethodDef hl_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))hl_py_acquire, METH_FASTCALL, "acquire() -> True"},
    {"release", (PyCFunction)(void (*)(void))hl_py_release, METH_FASTCALL, "release()"},
    {"__enter__", (PyCFunction)(void (*)(void))hl_py_acquire, METH_FASTCALL, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))hl_py_release, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot hl_slots[] = {
    {Py_tp_doc, (void *)"The refs' holds' reentrant lock (_runtime._holds_lock)"},
    {Py_tp_new, hl_new},
    {Py_tp_dealloc, hl_dealloc},
    {Py_tp_methods, hl_methods},
    {0, NULL},
};

static PyType_Spec hl_spec = {
    "troupe._fast.HoldLock", sizeof(HoldLockObject), 0, Py_TPFLAGS_DEFAULT, hl_slots,
};

/* The count of rt's hold of id goes down, under the holds' lock; where it was the last,
 * its entry goes and the C hold with it (tr_ref_release). Nothing where rt is not the
 * runtime this process runs now. 0, or -1 with a Python error set. */
static int drop_hold(const tr_ref *id, PyObject *rt) {
    PyObject *now, *key, *h;
    void *rtp;
    int last = 0, err = 0;

    if (!F.ready || !current_runtime(&now, &rtp) || now != rt) return 0;
    if ((key = PyBytes_FromStringAndSize((const char *)id->b, sizeof(id->b))) == NULL) return -1;
    hl_acquire((HoldLockObject *)F.holds_lock);
    h = PyDict_GetItemWithError(F.holds, key); /* borrowed: [count, rt] */
    if (h != NULL && PyList_Check(h) && PyList_Size(h) == 2 && PyList_GetItem(h, 1) == rt) {
        long count = PyLong_AsLong(PyList_GetItem(h, 0)) - 1;
        PyObject *n = count > 0 ? PyLong_FromLong(count) : NULL;
        if (n != NULL) {
            err = PyList_SetItem(h, 0, n) < 0; /* (steals n) */
        } else if (count <= 0 && !PyErr_Occurred()) {
            err = PyDict_DelItem(F.holds, key) < 0;
            last = !err;
        } else {
            err = 1;
        }
    }
    Py_DECREF(key);
    if (last) { /* (under the lock: a borrow of the id waits until the C hold is gone) */
        PyThreadState *ts = PyEval_SaveThread();
        F.release((tr_runtime *)rtp, *id);
        PyEval_RestoreThread(ts);
    }
    if (hl_release((HoldLockObject *)F.holds_lock) < 0 || err) return -1;
    return PyErr_Occurred() ? -1 : 0;
}

/* A made ref's id leaves it (_c: the Python code may make another ObjectRef of it):
 * from now on it counts in _holds, as the ObjectRefs the Python code makes do. Until
 * then it is the only one of its id here (the id is new, and nothing else has seen it),
 * and its hold is its own. 0, or -1 with a Python error set. */
static int register_hold(RefObject *r) {
    PyObject *key, *h, *n;
    int err = 0;

    if (!r->made || r->registered || !r->owned || r->rt == NULL) return 0;
    if ((key = PyBytes_FromStringAndSize((const char *)r->id.b, sizeof(r->id.b))) == NULL)
        return -1;
    hl_acquire((HoldLockObject *)F.holds_lock); /* (may let the GIL go: looked at again) */
    if (r->registered) {
        Py_DECREF(key);
        return hl_release((HoldLockObject *)F.holds_lock);
    }
    h = PyDict_GetItemWithError(F.holds, key); /* borrowed: [count, rt] */
    if (h != NULL && PyList_Check(h) && PyList_Size(h) == 2 && PyList_GetItem(h, 1) == r->rt) {
        n = PyLong_FromLong(PyLong_AsLong(PyList_GetItem(h, 0)) + 1);
        err = n == NULL || PyList_SetItem(h, 0, n) < 0;
    } else if (!PyErr_Occurred()) {
        h = Py_BuildValue("[iO]", 1, r->rt);
        err = h == NULL || PyDict_SetItem(F.holds, key, h) < 0;
        Py_XDECREF(h);
    } else {
        err = 1;
    }
    Py_DECREF(key);
    if (!err) r->registered = 1; /* (before the lock goes: no other thread counts it again) */
    if (hl_release((HoldLockObject *)F.holds_lock) < 0 || err) return -1;
    return 0;
}

/* Moves the waiting releases (of the runtime current_runtime saw last) into ids; their
 * count. GIL held. */
static size_t pend_take(tr_ref *ids) {
    size_t n = n_pend;

    memcpy(ids, pend, n * sizeof *ids);
    n_pend = 0;
    return n;
}

/* The releases pend_take took, of runtime rtp. The GIL let go. */
static void pend_release(void *rtp, const tr_ref *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        F.release((tr_runtime *)rtp, ids[i]);
}

/* The waiting releases, done now (the GIL let go meanwhile). */
static void pend_flush(void *rtp) {
    tr_ref ids[PEND_MAX];
    size_t n = pend_take(ids);

    if (n == 0) return;
    PyThreadState *ts = PyEval_SaveThread();
    pend_release(rtp, ids, n);
    PyEval_RestoreThread(ts);
}

/* flush(): the waiting releases done now (_runtime.runtime() calls it: any use of the
 * runtime by the Python paths sees them done). */
static PyObject *fast_flush(PyObject *self, PyObject *unused) {
    PyObject *rt;
    void *rtp;
    (void)self, (void)unused;

    if (F.ready && n_pend > 0 && current_runtime(&rt, &rtp)) pend_flush(rtp);
    Py_RETURN_NONE;
}

/* pending(): the ids whose releases wait (bytes each; the tests'). */
static PyObject *fast_pending(PyObject *self, PyObject *unused) {
    PyObject *out = PyList_New((Py_ssize_t)n_pend), *b;
    (void)self, (void)unused;

    for (size_t i = 0; out != NULL && i < n_pend; i++) {
        if ((b = PyBytes_FromStringAndSize((const char *)pend[i].b, sizeof pend[i].b)) == NULL)
            Py_CLEAR(out);
        else
            PyList_SetItem(out, (Py_ssize_t)i, b); /* (steals b) */
    }
    return out;
}

/* The release of a made ref that never counted in _holds (its hold is its own): its
 * call's slot here, if the runtime it was made under still runs; put off where its value
 * was small (above). */
static void release_made(RefObject *r) {
    PyObject *now;
    void *rtp;

    if (F.ready && current_runtime(&now, &rtp) > 0 && now == r->rt) {
        if (r->small) {
            pend[n_pend++] = r->id;
            if (n_pend == PEND_MAX) pend_flush(rtp);
        } else {
            /* (the GIL let go: the library may wait for its lock, which it holds while it
             * moves an object to or from disk) */
            PyThreadState *ts = PyEval_SaveThread();
            F.release((tr_runtime *)rtp, r->id);
            PyEval_RestoreThread(ts);
        }
    }
    PyErr_Clear();
}

static void ref_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    RefObject *r = REF(self);

    if (r->weakrefs != NULL) PyObject_ClearWeakRefs(self);
    if (r->owned && r->rt != NULL) { /* (errors swallowed, as a finalizer's; one being
                                      * raised meanwhile kept aside) */
        PyObject *type = NULL, *value = NULL, *tb = NULL;
        int raised = PyErr_Occurred() != NULL;
        if (raised) PyErr_Fetch(&type, &value, &tb);
        if (r->made && !r->registered)
            release_made(r);
        else if (drop_hold(&r->id, r->rt) < 0)
            PyErr_Clear();
        if (raised) PyErr_Restore(type, value, tb);
    }
    Py_CLEAR(r->rt);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp); /* (a heap type's instance holds its type) */
}

/* _c: the id as a ctypes Ref (a copy: what the ctypes paths pass to the library) */
static PyObject *ref_get_c(PyObject *self, void *closure) {
    (void)closure;
    if (F.ref_type == NULL) return PyErr_Format(PyExc_RuntimeError, "troupe._fast: not configured");
    if (register_hold(REF(self)) < 0) return NULL;
    return PyObject_CallMethod(F.ref_type, "from_buffer_copy", "y#", (const char *)REF(self)->id.b,
                               (Py_ssize_t)sizeof(REF(self)->id.b));
}

static int ref_set_c(PyObject *self, PyObject *v, void *closure) {
    (void)closure;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "an ObjectRef's _c cannot be deleted");
        return -1;
    }
    return ctypes_bytes(v, &REF(self)->id, sizeof(REF(self)->id));
}

static PyObject *ref_get_owned(PyObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(REF(self)->owned);
}

static int ref_set_owned(PyObject *self, PyObject *v, void *closure) {
    int yes = v == NULL ? 0 : PyObject_IsTrue(v);
    (void)closure;
    if (yes < 0) return -1;
    REF(self)->owned = (char)yes;
    return 0;
}

static PyObject *ref_get_rt(PyObject *self, void *closure) {
    PyObject *rt = REF(self)->rt ? REF(self)->rt : Py_None;
    (void)closure;
    Py_INCREF(rt);
    return rt;
}

static int ref_set_rt(PyObject *self, PyObject *v, void *closure) {
    (void)closure;
    if (v == Py_None) v = NULL;
    Py_XINCREF(v);
    SETREF(REF(self)->rt, v);
    return 0;
}

static PyGetSetDef ref_getset[] = {
    {"_c", ref_get_c, ref_set_c, "the id (a ctypes Ref: a copy)", NULL},
    {"_owned", ref_get_owned, ref_set_owned, "counts in this process's hold of the id", NULL},
    {"_rt", ref_get_rt, ref_set_rt, "the runtime it was made or got under (None: none)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef ref_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(RefObject, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot ref_slots[] = {
    {Py_tp_doc, (void *)"ObjectRef's fields in C (troupe._runtime.ObjectRef is the class)"},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ref_dealloc},
    {Py_tp_getset, ref_getset},
    {Py_tp_members, ref_members},
    {0, NULL},
};

static PyType_Spec ref_spec = {
    "troupe._fast.RefBase",
    sizeof(RefObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    ref_slots,
};

/* An ObjectRef of a ref this process just made (its id is new here, so its hold is
 * registered without the lock). */
static PyObject *fresh_ref(const tr_ref *ref, PyObject *rt) {
    PyTypeObject *tp = (PyTypeObject *)F.object_ref_type;
    PyObject *obj;

    if ((obj = ((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0)) == NULL) return NULL;
    /* Not tracked by the collector: ObjectRef (a class statement's type, so collected)
     * has no __dict__ and holds only rt, which holds nothing, so no cycle passes through
     * one made here. Tracked, 20,000 pipelined calls' refs made the young generation's
     * collections scan them all, and moved them on to the old one: a full collection
     * every few thousand calls (gc.disable() made them 1.4-1.7x faster). */
    if (PyType_IS_GC(tp)) PyObject_GC_UnTrack(obj);
    REF(obj)->id = *ref;
    Py_INCREF(rt);
    REF(obj)->rt = rt;
    REF(obj)->owned = 1;
    REF(obj)->made = 1;
    return obj;
}

/* ------------------------------------------------------------------ the caller */

/* prefix + MAGIC0 + the pickle of (args, kwargs) (kwargs NULL: none) into buf
 * (STACK_BYTES), or into a malloc'ed buffer (*heap, the caller's to free); NULL with no
 * error set where the arguments are not all builtin scalars or too large (MAGIC0 and the
 * pickle over inline_max). */
static const char *frame_args(const char *prefix, Py_ssize_t n_prefix, const args_view *args,
                              PyObject *kwargs, char *buf, char **heap, Py_ssize_t *len) {
    Py_ssize_t n = args->n, pos = 0;
    PyObject *k, *v, *both, *data, *t;
    wbuf w = {buf, NULL, 0, STACK_BYTES};
    char *src;
    Py_ssize_t dn;
    int r;

    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_simple(arg_at(args, i))) return NULL;
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &k, &v))
        if (!is_simple(v)) return NULL;
    if (w_put(&w, prefix, (size_t)n_prefix) || w_put(&w, MAGIC0, MAGIC_LEN) ||
        (r = enc_args(&w, args, kwargs)) < 0)
        goto fail;
    if (r == 0) { /* (pickle's: a complex, an int over 64 bits, a lone surrogate) */
        w.len = (size_t)n_prefix + MAGIC_LEN;
        if ((t = args_tuple(NULL, args)) == NULL) goto fail;
        both = kwargs != NULL ? PyTuple_Pack(2, t, kwargs) : Py_BuildValue("(O{})", t);
        Py_DECREF(t);
        if (both == NULL) goto fail;
        data = PyObject_CallFunctionObjArgs(F.dumps, both, F.protocol, NULL);
        Py_DECREF(both);
        if (data == NULL || PyBytes_AsStringAndSize(data, &src, &dn) < 0 ||
            w_put(&w, src, (size_t)dn)) {
            Py_XDECREF(data);
            goto fail;
        }
        Py_DECREF(data);
    }
    if ((Py_ssize_t)w.len - n_prefix > F.inline_max) {
        free(w.heap);
        return NULL;
    }
    *heap = w.heap;
    *len = (Py_ssize_t)w.len;
    return w.p;
fail:
    free(w.heap);
    return NULL;
}

/* What a submit (tr_call, tr_task_submit) of status rc made: the ObjectRef of out, or NULL
 * with the error failed(rc, a[, b]) raises, as the general path's. rt: the runtime
 * object (borrowed), rtp its pointer. */
static PyObject *submitted(int rc, const tr_ref *out, PyObject *rt, void *rtp, PyObject *failed,
                           PyObject *a, PyObject *b) {
    PyObject *res;

    if (rc != 0) {
        res = b ? PyObject_CallFunction(failed, "iOO", rc, a, b)
                : PyObject_CallFunction(failed, "iO", rc, a);
        Py_XDECREF(res);
        return res == NULL ? NULL : PyErr_Format(PyExc_SystemError, "a failed submit returned");
    }
    if ((res = fresh_ref(out, rt)) == NULL) { /* (out of memory: the C ref is let go) */
        PyThreadState *ts = PyEval_SaveThread();
        F.release((tr_runtime *)rtp, *out);
        PyEval_RestoreThread(ts);
    }
    return res;
}

/* The ObjectRef of a call of actor id's method (name, its UTF-8 name_s) whose arguments
 * (kwargs NULL: none) are builtin scalars, or None where they are not (or troupe is not running
 * here): the caller takes its general path then. An error of tr_call raises as the general path's
 * does (class_name words it). */
static PyObject *call_plain(const tr_actor_id *id, PyObject *name, const char *name_s,
                            const args_view *args, PyObject *kwargs, PyObject *class_name) {
    PyObject *rt, *res;
    void *rtp;
    tr_ref out;
    char buf[STACK_BYTES], *heap = NULL;
    const char *payload;
    Py_ssize_t len = 0;
    int rc;

    if (!current_runtime(&rt, &rtp)) /* (none: the general path starts troupe, or says
                                      * why not) */
        Py_RETURN_NONE;
    Py_INCREF(rt); /* (held: Python code may run, or the GIL go, meanwhile) */
    payload = frame_args(NULL, 0, args, kwargs, buf, &heap, &len);
    if (payload == NULL) {
        Py_DECREF(rt);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    /* the GIL kept where the call cannot wait (a GIL round cost a sync call ~20 ns) */
    if ((rc = F.call_nowait((tr_runtime *)rtp, *id, name_s, payload, (size_t)len, &out)) ==
        TR_EAGAIN) {
        tr_ref ids[PEND_MAX];
        size_t n_ids = pend_take(ids);
        PyThreadState *ts = PyEval_SaveThread();
        rc = F.call((tr_runtime *)rtp, *id, name_s, payload, (size_t)len, &out);
        pend_release(rtp, ids, n_ids); /* (while the call's bytes travel) */
        PyEval_RestoreThread(ts);
    }
    free(heap);
    res = submitted(rc, &out, rt, rtp, F.call_failed, class_name, name);
    Py_DECREF(rt);
    return res;
}

/* call_one(actor_id, method, args, kwargs, class_name): call_plain's, the actor's id a
 * ctypes ActorId. */
static PyObject *fast_call_one(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    tr_actor_id id;
    const char *name;
    (void)self;

    if (argc != 5) return PyErr_Format(PyExc_TypeError, "call_one takes 5 arguments");
    if (!F.ready || !PyTuple_Check(argv[2]) || !PyDict_Check(argv[3])) Py_RETURN_NONE;
    if (ctypes_bytes(argv[0], &id, sizeof(id)) < 0 ||
        (name = PyUnicode_AsUTF8AndSize(argv[1], NULL)) == NULL)
        return NULL;
    args_view av = tuple_args(argv[2]);
    return call_plain(&id, argv[1], name, &av, argv[3], argv[4]);
}

/* Remote(method, actor_id, name, class_name, lo, hi, handle_ref): a handle's method's
 * remote() of one result and no options (actor.ActorMethod's, set as its attribute
 * `remote`), a call of scalars made here. Anything else, a call of arguments its
 * signature refuses (fewer than lo or more than hi, or keywords where it checks them:
 * lo >= 0), or a handle gone (handle_ref: a weakref of it), goes to the method's general
 * remote(): general(method, *args, **kwargs) (configure's "remote_general"). */
typedef struct {
    PyObject_HEAD tr_actor_id id;
    vcall_fn vectorcall; /* remote_vectorcall */
    PyObject *method, *name, *class_name, *handle;
    const char *name_s; /* (name's UTF-8: name keeps it) */
    Py_ssize_t lo, hi;
    PyObject *dict; /* (its __name__, __wrapped__: actor.py sets them) */
} RemoteObject;

static PyObject *remote_general(RemoteObject *r, const args_view *args, PyObject *kwargs) {
    PyObject *all = args_tuple(r->method, args), *res;

    if (all == NULL) return NULL;
    res = PyObject_Call(F.remote_general, all, kwargs);
    Py_DECREF(all);
    return res;
}

static PyObject *remote_args(RemoteObject *r, const args_view *args, PyObject *kwargs) {
    Py_ssize_t n = args->n;
    PyObject *res;

    if (!F.ready ||
        (r->lo >= 0 && ((kwargs != NULL && PyDict_Size(kwargs) > 0) || n < r->lo || n > r->hi)))
        return remote_general(r, args, kwargs);
    PyObject *h = PyWeakref_GetObject(r->handle); /* borrowed */
    if (h == NULL) return NULL;
    if (h == Py_None) return remote_general(r, args, kwargs); /* (gone: it says so) */
    Py_INCREF(h); /* (alive through the call: the GIL goes meanwhile) */
    res = call_plain(&r->id, r->name, r->name_s, args, kwargs, r->class_name);
    Py_DECREF(h);
    if (res != Py_None) return res;
    Py_DECREF(res);
    return remote_general(r, args, kwargs);
}

static PyObject *remote_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    args_view av = tuple_args(args);
    return remote_args((RemoteObject *)self, &av, kwargs);
}

/* remote(...) as the interpreter calls it: the arguments in place (keywords: as a dict) */
static PyObject *remote_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
                                   PyObject *kwnames) {
    PyObject *args, *kwargs, *res;

    if (kwnames == NULL || PyTuple_Size(kwnames) == 0) {
        args_view av = {NULL, argv, (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET)};
        return remote_args((RemoteObject *)self, &av, NULL);
    }
    if (vcall_split(argv, nargsf, kwnames, &args, &kwargs) < 0) return NULL;
    res = remote_call(self, args, kwargs);
    Py_DECREF(args);
    Py_XDECREF(kwargs);
    return res;
}

static PyObject *remote_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs) {
    PyObject *method, *aid, *name, *class_name, *handle;
    Py_ssize_t lo, hi;
    RemoteObject *r;

    if (kwargs != NULL && PyDict_Size(kwargs) > 0)
        return PyErr_Format(PyExc_TypeError, "Remote takes no keywords");
    if (!PyArg_ParseTuple(args, "OOUUnnO", &method, &aid, &name, &class_name, &lo, &hi, &handle))
        return NULL;
    if (!PyWeakref_CheckRef(handle))
        return PyErr_Format(PyExc_TypeError, "Remote: the handle is a weakref of it");
    if ((r = (RemoteObject *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0)) == NULL)
        return NULL;
    if (ctypes_bytes(aid, &r->id, sizeof(r->id)) < 0 ||
        (r->name_s = PyUnicode_AsUTF8AndSize(name, NULL)) == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    Py_INCREF(method), Py_INCREF(name), Py_INCREF(class_name), Py_INCREF(handle);
    r->method = method, r->name = name, r->class_name = class_name, r->handle = handle;
    r->lo = lo, r->hi = hi;
    r->vectorcall = remote_vectorcall;
    return (PyObject *)r;
}

/* __reduce__: the method's remote, again (a copy pickles as its method: by its handle) */
static PyObject *remote_reduce(PyObject *self, PyObject *unused) {
    PyObject *builtins = PyImport_ImportModule("builtins"), *getattr;
    (void)unused;
    if (builtins == NULL) return NULL;
    getattr = PyObject_GetAttrString(builtins, "getattr");
    Py_DECREF(builtins);
    if (getattr == NULL) return NULL;
    return Py_BuildValue("(N(Os))", getattr, ((RemoteObject *)self)->method, "remote");
}

static PyMethodDef remote_methods[] = {
    {"__reduce__", remote_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef remote_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(RemoteObject, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(RemoteObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static int remote_traverse(PyObject *self, visitproc visit, void *arg) {
    RemoteObject *r = (RemoteObject *)self;
    Py_VISIT(r->method);
    Py_VISIT(r->handle);
    Py_VISIT(r->dict);
    Py_VISIT(Py_TYPE(self)); /* (a heap type's instance holds its type) */
    return 0;
}

static int remote_clear(PyObject *self) {
    RemoteObject *r = (RemoteObject *)self;
    Py_CLEAR(r->method);
    Py_CLEAR(r->handle);
    Py_CLEAR(r->dict);
    return 0;
}

/* The dealloc of this module's collected types (Remote, Get): untracked, cleared, freed,
 * its heap type let go. */
static void gc_dealloc(PyObject *self, inquiry clear) {
    PyTypeObject *tp = Py_TYPE(self);

    PyObject_GC_UnTrack(self);
    clear(self);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static void remote_dealloc(PyObject *self) {
    RemoteObject *r = (RemoteObject *)self;

    PyObject_GC_UnTrack(self); /* (again in gc_dealloc: harmless) */
    Py_CLEAR(r->name);         /* (kept by a clear: name_s points into it) */
    Py_CLEAR(r->class_name);
    gc_dealloc(self, remote_clear);
}

static PyType_Slot remote_slots[] = {
    {Py_tp_doc, (void *)"An actor method's remote() of plain calls (actor.ActorMethod's)"},
    {Py_tp_new, remote_new},
    {Py_tp_call, remote_call},
    {Py_tp_traverse, remote_traverse},
    {Py_tp_clear, remote_clear},
    {Py_tp_dealloc, remote_dealloc},
    {Py_tp_methods, remote_methods},
    {Py_tp_members, remote_members},
    {0, NULL},
};

static PyType_Spec remote_spec = {
    "troupe._fast.Remote",
    sizeof(RemoteObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    remote_slots,
};

/* task_one(rt, c_name, head, options_address, args, kwargs, function_name): the ObjectRef
 * of a task of one result whose arguments are builtin scalars (its payload: the prepared
 * head, then the arguments as call_one frames them), or None where they are not, or rt
 * (a ctypes c_void_p the head was prepared for) is not the runtime this process runs now:
 * the caller takes its general path then. An error of tr_task_submit raises as the
 * general path's does. */
static PyObject *fast_task_one(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    PyObject *rt;
    void *rtp, *opts;
    tr_ref out;
    char buf[STACK_BYTES], *heap = NULL, *head;
    const char *cname, *payload;
    Py_ssize_t len = 0, n_head;
    int rc;
    (void)self;

    if (argc != 7) return PyErr_Format(PyExc_TypeError, "task_one takes 7 arguments");
    if (!F.ready || !PyTuple_Check(argv[4]) || !PyDict_Check(argv[5])) Py_RETURN_NONE;
    if (!current_runtime(&rt, &rtp) || rt != argv[0]) Py_RETURN_NONE;
    if (!PyBytes_Check(argv[1]) || !PyBytes_Check(argv[2]) ||
        PyBytes_AsStringAndSize(argv[2], &head, &n_head) < 0)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "task_one: bytes");
    cname = PyBytes_AsString(argv[1]);
    opts = PyLong_AsVoidPtr(argv[3]);
    if (cname == NULL || (opts == NULL && PyErr_Occurred())) return NULL;
    Py_INCREF(rt); /* (held: Python code may run, or the GIL go, meanwhile) */
    args_view av = tuple_args(argv[4]);
    payload = frame_args(head, n_head, &av, argv[5], buf, &heap, &len);
    if (payload == NULL) {
        Py_DECREF(rt);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    tr_ref ids[PEND_MAX];
    size_t n_ids = pend_take(ids);
    PyThreadState *ts = PyEval_SaveThread();
    rc = F.task_submit((tr_runtime *)rtp, cname, payload, (size_t)len, NULL, 0,
                       (const tr_task_options *)opts, &out);
    pend_release(rtp, ids, n_ids);
    PyEval_RestoreThread(ts);
    free(heap);
    PyObject *res = submitted(rc, &out, rt, rtp, F.submit_failed, argv[6], NULL);
    Py_DECREF(rt);
    return res;
}

/* Waits for ref with no timeout, in slices that see signals (Ctrl-C, as the ctypes
 * path). 0 with *rc, *data, *n set; -1 with a Python error set. */
static int wait_ref(void *rtp, const tr_ref *ref, int *rc, const void **data, size_t *n) {
    for (;;) {
        tr_ref ids[PEND_MAX];
        size_t n_ids = pend_take(ids);
        PyThreadState *ts = PyEval_SaveThread();
        pend_release(rtp, ids, n_ids); /* (while its reply is awaited) */
        *rc = F.get((tr_runtime *)rtp, *ref, F.slice_ms, data, n);
        PyEval_RestoreThread(ts);
        if (*rc != F.etimedout) return 0;
        if (PyErr_CheckSignals() < 0) return -1;
    }
}

/* The value of a got ref whose payload is a plain pickle (a new reference): read here,
 * or by pickle.loads where it is small; else NULL, with a Python error set where reading
 * failed, with none where it is not such a payload (the general decoder's). */
static PyObject *plain_value(int rc, const void *data, size_t n) {
    PyObject *bytes, *v = NULL;
    int got;

    if (rc != 0 || n < MAGIC_LEN || memcmp(data, MAGIC0, MAGIC_LEN) != 0) return NULL;
    /* (no Python code runs here meanwhile: the caller's hold keeps the memory) */
    if ((got = dec_pickle((const unsigned char *)data + MAGIC_LEN, n - MAGIC_LEN, &v)) != 0)
        return v;
    if ((Py_ssize_t)n > F.copy_max) return NULL;
    /* (a copy: unpickling may run code that releases the ref) */
    bytes = PyBytes_FromStringAndSize((const char *)data + MAGIC_LEN, (Py_ssize_t)n - MAGIC_LEN);
    if (bytes == NULL) return NULL;
    v = PyObject_CallFunctionObjArgs(F.loads, bytes, NULL);
    Py_DECREF(bytes);
    return v;
}

/* The value of ref, got (rc 0: n bytes at data): a plain pickle here, any other payload
 * by _runtime's decoder (decode(ref, address, n): Python code runs, *ran set). NULL with
 * no error set where rc is an error (the general get words it). */
static PyObject *got_value(PyObject *ref, int rc, const void *data, size_t n, int *ran) {
    PyObject *v = plain_value(rc, data, n);

    if (v != NULL) REF(ref)->small = n <= PEND_SMALL; /* (its release may wait) */
    if (v != NULL || PyErr_Occurred() || rc != 0) return v;
    *ran = 1;
    return PyObject_CallFunction(F.decode, "ONn", ref, PyLong_FromVoidPtr((void *)data),
                                 (Py_ssize_t)n);
}

/* The value of ref (an ObjectRef) where this process holds it under the runtime it runs
 * now (rt, rtp) (a new reference); else NULL, with a Python error set where waiting or
 * decoding failed, with none where the general get is to take it (not held here, or an
 * error to word). *ran: Python code ran. */
static PyObject *ref_value(PyObject *rt, void *rtp, PyObject *ref, int *ran) {
    const void *data = NULL;
    size_t n = 0;
    int rc;

    if (!REF(ref)->owned || REF(ref)->rt != rt) return NULL;
    if (wait_ref(rtp, &REF(ref)->id, &rc, &data, &n) < 0) return NULL;
    return got_value(ref, rc, data, n, ran);
}

/* get(refs, slow): the value of an ObjectRef, or the values of a list or tuple of them
 * in order, with no timeout: each held here whose value is a small plain pickle here,
 * every other by slow(ref) (the general get; slow None: the whole answer is not_taken
 * then). not_taken where refs is neither, an item is no ObjectRef or troupe is not
 * running here (the caller's general path then). */
static PyObject *fast_get(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    PyObject *refs, *slow, *out = NULL, *item, *v, *rt, *now, *items;
    Py_ssize_t n;
    void *rtp;
    int got, list, ran = 0;
    struct {
        tr_ref id;
        const void *data;
        size_t len;
        int rc;
        char want, tried;
    } one[16], *pre = one;
    (void)self;

    if (argc != 2) return PyErr_Format(PyExc_TypeError, "get takes 2 arguments");
    refs = argv[0], slow = argv[1];
    list = PyList_Check(refs);
    if (!F.ready || !(is_ref(refs) || list || PyTuple_Check(refs))) goto not_taken;
    if (!list && !PyTuple_Check(refs)) { /* one ref */
        if (!current_runtime(&rt, &rtp)) goto not_taken;
        if ((v = ref_value(rt, rtp, refs, &ran)) != NULL || PyErr_Occurred()) return v;
        if (slow == Py_None) goto not_taken;
        return PyObject_CallFunctionObjArgs(slow, refs, NULL);
    }
    n = list ? PyList_Size(refs) : PyTuple_Size(refs);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_ref(list ? PyList_GetItem(refs, i) : PyTuple_GetItem(refs, i))) goto not_taken;
    if (!current_runtime(&rt, &rtp) || slow == Py_None) goto not_taken;
    /* the items held meanwhile (the list may change while Python code runs or the GIL
     * is let go) */
    if (list) {
        if ((items = PyList_AsTuple(refs)) == NULL) return NULL;
    } else {
        items = refs;
        Py_INCREF(items);
    }
    n = PyTuple_Size(items);
    if ((out = PyList_New(n)) == NULL) goto fail;
    if (n > (Py_ssize_t)(sizeof one / sizeof one[0]) &&
        (pre = malloc((size_t)n * sizeof *pre)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* First, with the GIL let go once, the gets of those held here that are in already
     * (up to the first that is not): their memory stays while items holds them. */
    for (Py_ssize_t i = 0; i < n; i++) {
        item = PyTuple_GetItem(items, i);
        pre[i].id = REF(item)->id;
        pre[i].tried = 0;
        pre[i].want = REF(item)->owned && REF(item)->rt == rt;
    }
    tr_ref ids[PEND_MAX];
    size_t n_ids = pend_take(ids);
    PyThreadState *ts = PyEval_SaveThread();
    pend_release(rtp, ids, n_ids);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!pre[i].want) continue;
        pre[i].rc = F.get((tr_runtime *)rtp, pre[i].id, 0, &pre[i].data, &pre[i].len);
        if (pre[i].rc == F.etimedout) break;
        pre[i].tried = 1;
    }
    PyEval_RestoreThread(ts);
    for (Py_ssize_t i = 0; i < n; i++) {
        item = PyTuple_GetItem(items, i);
        ran = 0;
        if (pre[i].tried)
            v = got_value(item, pre[i].rc, pre[i].data, pre[i].len, &ran);
        else
            v = rt != NULL ? ref_value(rt, rtp, item, &ran) : NULL;
        if (v == NULL && !PyErr_Occurred()) {
            v = PyObject_CallFunctionObjArgs(slow, item, NULL);
            ran = 1;
        }
        /* (Python code ran: the runtime may have changed; what was got before is not
         * read then) */
        if (v != NULL && ran && (!(got = current_runtime(&now, &rtp)) || now != rt)) {
            rt = got ? now : NULL;
            for (Py_ssize_t k = i + 1; k < n; k++)
                pre[k].tried = 0;
        }
        if (v == NULL) goto fail;
        PyList_SetItem(out, i, v); /* (steals v) */
    }
    if (pre != one) free(pre);
    Py_DECREF(items);
    return out;
fail:
    if (pre != one) free(pre);
    Py_XDECREF(out);
    Py_DECREF(items);
    return NULL;
not_taken:
    Py_INCREF(F.not_taken);
    return F.not_taken;
}

/* Get(general, slow): troupe.get where this module is used. get(refs) with no timeout
 * (or timeout=None) is fast_get(refs, slow) here; anything else, and whatever fast_get
 * does not take, is general(*args, **kwargs) (_runtime's get). Its __dict__ takes the
 * function's attributes (__wrapped__, __doc__, __name__: inspect sees the general one). */
typedef struct {
    PyObject_HEAD vcall_fn vectorcall; /* getter_vectorcall */
    PyObject *general, *slow, *dict;
} GetObject;

static PyObject *getter_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    GetObject *g = (GetObject *)self;
    PyObject *argv[2], *v, *timeout;

    if (PyTuple_Size(args) == 1 &&
        (kwargs == NULL || PyDict_Size(kwargs) == 0 ||
         (PyDict_Size(kwargs) == 1 && (timeout = PyDict_GetItemString(kwargs, "timeout")) != NULL &&
          timeout == Py_None))) {
        argv[0] = PyTuple_GetItem(args, 0), argv[1] = g->slow;
        if ((v = fast_get(NULL, argv, 2)) != F.not_taken) return v;
        Py_DECREF(v);
    }
    return PyObject_Call(g->general, args, kwargs);
}

/* get(...) as the interpreter calls it: get(refs) and get(refs, timeout=None) in place */
static PyObject *getter_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
                                   PyObject *kwnames) {
    Py_ssize_t n = (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET);
    Py_ssize_t nk = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    PyObject *args, *kwargs, *v, *fa[2];

    if (n == 1 && (nk == 0 || (nk == 1 && argv[1] == Py_None &&
                               PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, 0),
                                                                "timeout") == 0))) {
        fa[0] = argv[0], fa[1] = ((GetObject *)self)->slow;
        if ((v = fast_get(NULL, fa, 2)) != F.not_taken) return v;
        Py_DECREF(v);
    }
    if (vcall_split(argv, nargsf, kwnames, &args, &kwargs) < 0) return NULL;
    v = PyObject_Call(((GetObject *)self)->general, args, kwargs);
    Py_DECREF(args);
    Py_XDECREF(kwargs);
    return v;
}

static PyObject *getter_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs) {
    PyObject *general, *slow;
    GetObject *g;

    if ((kwargs != NULL && PyDict_Size(kwargs) > 0) ||
        !PyArg_ParseTuple(args, "OO", &general, &slow))
        return kwargs != NULL && PyDict_Size(kwargs) > 0
                   ? PyErr_Format(PyExc_TypeError, "Get takes no keywords")
                   : NULL;
    if ((g = (GetObject *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0)) == NULL) return NULL;
    Py_INCREF(general), Py_INCREF(slow);
    g->general = general, g->slow = slow;
    g->vectorcall = getter_vectorcall;
    return (PyObject *)g;
}

static int getter_traverse(PyObject *self, visitproc visit, void *arg) {
    GetObject *g = (GetObject *)self;
    Py_VISIT(g->general);
    Py_VISIT(g->slow);
    Py_VISIT(g->dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int getter_clear(PyObject *self) {
    GetObject *g = (GetObject *)self;
    Py_CLEAR(g->general);
    Py_CLEAR(g->slow);
    Py_CLEAR(g->dict);
    return 0;
}

static void getter_dealloc(PyObject *self) {
    gc_dealloc(self, getter_clear);
}

static PyMemberDef getter_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(GetObject, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(GetObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot getter_slots[] = {
    {Py_tp_doc, (void *)"troupe.get, its plain cases in C (_runtime's get the others)"},
    {Py_tp_new, getter_new},
    {Py_tp_call, getter_call},
    {Py_tp_traverse, getter_traverse},
    {Py_tp_clear, getter_clear},
    {Py_tp_dealloc, getter_dealloc},
    {Py_tp_members, getter_members},
    {0, NULL},
};

static PyType_Spec getter_spec = {
    "troupe._fast.Get",
    sizeof(GetObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    getter_slots,
};

/* ------------------------------------------------------------------ the worker */

static _Thread_local int pinned;          /* this thread keeps its Python thread state */
static _Thread_local tr_ctx *current_ctx; /* the plain call or task this thread runs here */
static _Thread_local int kept;            /* this thread holds the GIL since its last plain call */

/* The result of a plain method: MAGIC0 + its pickle, replied here. Returns the call's rc,
 * or -1 with a Python error set. */
static int reply_simple(tr_ctx *ctx, PyObject *result) {
    char buf[STACK_BYTES], *src;
    wbuf w = {buf, NULL, 0, sizeof buf};
    Py_ssize_t dn;
    PyObject *data;
    int rc, r;

    if (w_put(&w, MAGIC0, MAGIC_LEN) || (r = enc_result(&w, result)) < 0) goto fail;
    if (r == 0) { /* (pickle's: a complex, an int over 64 bits, a lone surrogate) */
        w.len = MAGIC_LEN;
        data = PyObject_CallFunctionObjArgs(F.dumps, result, F.protocol, NULL);
        if (data == NULL || PyBytes_AsStringAndSize(data, &src, &dn) < 0 ||
            w_put(&w, src, (size_t)dn)) {
            Py_XDECREF(data);
            goto fail;
        }
        Py_DECREF(data);
    }
    if (w.len <= sizeof buf) { /* (a small copy into the call's reply: the GIL kept) */
        rc = F.ctx_reply(ctx, w.p, w.len);
    } else { /* (a large one, or a graph's value over its slot, an object made: let go) */
        PyThreadState *ts = PyEval_SaveThread();
        rc = F.ctx_reply(ctx, w.p, w.len);
        PyEval_RestoreThread(ts);
    }
    free(w.heap);
    return rc;
fail:
    free(w.heap);
    return -1;
}

/* The call's ctx as the int _worker's Python takes (made on first need: a plain method
 * that succeeds with a scalar never needs it). NULL with a Python error set. */
static PyObject *ctx_object(tr_ctx *ctx, PyObject **ctxobj) {
    if (*ctxobj == NULL) *ctxobj = PyLong_FromVoidPtr(ctx);
    return *ctxobj;
}

/* The method's or task's exception (set) goes to _worker's handlers (failed): ActorExit,
 * SystemExit, else the error replied. Returns their rc. */
static int hand_failure(tr_ctx *ctx, PyObject **ctxobj, PyObject *failed) {
    PyObject *type, *value, *tb, *r;
    long rc;

    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL || ctx_object(ctx, ctxobj) == NULL) {
        PyErr_Clear(); /* (ctx_object's MemoryError: the call fails all the same) */
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return TR_ETASK;
    }
    if (tb != NULL) PyException_SetTraceback(value, tb);
    r = PyObject_CallFunctionObjArgs(failed, *ctxobj, value, NULL);
    Py_XDECREF(type);
    Py_DECREF(value);
    Py_XDECREF(tb);
    rc = r == NULL ? TR_ETASK : PyLong_AsLong(r);
    Py_XDECREF(r);
    if (PyErr_Occurred()) { /* (the handlers' own failure: printed, the call fails) */
        PyErr_WriteUnraisable(failed);
        return TR_ETASK;
    }
    return (int)rc;
}

/* Whether a call's (args, kwargs) hold refs passed as arguments (_serial.ArgRef). */
static int has_arg_refs(PyObject *a, PyObject *kw) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;

    for (Py_ssize_t i = 0, n = PyTuple_Size(a); i < n; i++)
        if ((PyObject *)Py_TYPE(PyTuple_GetItem(a, i)) == F.arg_ref) return 1;
    while (kw != NULL && PyDict_Next(kw, &pos, &k, &v))
        if ((PyObject *)Py_TYPE(v) == F.arg_ref) return 1;
    return 0;
}

/* Whether exit_actor() was called in this process (_runtime.exit_requested; it tells
 * set_exit_requested): the method that called it, even one that caught its exception,
 * ends the actor (finish does). */
static int exit_requested(void) {
    return F.exit_requested;
}

/* set_exit_requested(): exit_actor() was called in this process. */
static PyObject *fast_set_exit_requested(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    F.exit_requested = 1;
    Py_RETURN_NONE;
}

/* The result goes back: a builtin scalar replied here, any other value (or a reply's own
 * error, rc) through _worker's Python: finish(ctx, result, rc). Returns the call's rc, or
 * -1 with a Python error set. */
static int reply_result(tr_ctx *ctx, PyObject **ctxobj, PyObject *result, PyObject *finish) {
    PyObject *r;
    int rc;

    if (is_simple(result) && !exit_requested()) {
        rc = reply_simple(ctx, result);
        if (rc == 0 || (rc == -1 && PyErr_Occurred())) return rc;
    } else {
        rc = 0;
    }
    if (ctx_object(ctx, ctxobj) == NULL) return -1;
    r = PyObject_CallFunction(finish, "OOi", *ctxobj, result, rc);
    if (r == NULL) return -1;
    rc = (int)PyLong_AsLong(r);
    Py_DECREF(r);
    return rc == -1 && PyErr_Occurred() ? -1 : rc;
}

/* The arguments of a call whose pickle (MAGIC0 stripped) is enc_args' of no keywords:
 * ... TUPLEn EMPTY_DICT TUPLE2 STOP. Its args tuple alone is read, from a copy of the
 * pickle that stops after it: no (args, kwargs) pair and no empty dict are made and freed
 * (~95 ns of a call's ~900 ns dispatch here). A new reference, or NULL with no error set
 * where the pickle is not such or is not read here: the caller reads it whole then. */
static PyObject *load_args_only(const char *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    unsigned char buf[256];
    PyObject *a = NULL;

    if (n < 6 || n > sizeof buf || p[n - 1] != P_STOP || p[n - 2] != P_TUPLE2 ||
        p[n - 3] != P_EMPTY_DICT)
        return NULL;
    switch (p[n - 4]) {
    case P_EMPTY_TUPLE:
    case P_TUPLE1:
    case P_TUPLE2:
    case P_TUPLE3:
    case P_TUPLE:
        break;
    default:
        return NULL;
    }
    memcpy(buf, p, n - 3);
    buf[n - 3] = P_STOP;
    if (dec_pickle(buf, n - 2, &a) <= 0) { /* (not read here: the whole is, as before) */
        PyErr_Clear();
        return NULL;
    }
    if (!PyTuple_Check(a)) Py_CLEAR(a);
    return a;
}

/* The up to 3 scalar arguments that a call's pickle p (n bytes, MAGIC0 stripped: PROTO 5,
 * the scalars, TUPLEn or EMPTY_TUPLE, EMPTY_DICT TUPLE2 STOP: enc_args' of no keywords)
 * holds, read in place into x (new references): their count, or -1 with no error set
 * where it is not such (load_args_only's then). */
static int load_few_args(const unsigned char *p, size_t n, PyObject **x) {
    static const unsigned char tuple_of[4] = {P_EMPTY_TUPLE, P_TUPLE1, P_TUPLE2, P_TUPLE3};
    const unsigned char *end, *q;
    int k = 0, r = 1;

    if (n < 6 || p[0] != P_PROTO || p[1] != 5 || p[n - 1] != P_STOP || p[n - 2] != P_TUPLE2 ||
        p[n - 3] != P_EMPTY_DICT)
        return -1;
    end = p + n - 4; /* (the args' TUPLEn) */
    for (q = p + 2; q < end && k < 3;) {
        q++; /* (the operand) */
        if ((r = dec_scalar(q[-1], &q, end, &x[k])) <= 0) break;
        k++;
    }
    if (r > 0 && q == end && *end == tuple_of[k]) return k;
    while (k > 0) /* (those read) */
        Py_DECREF(x[--k]);
    PyErr_Clear(); /* (the general reader's to read, or to say what is wrong) */
    return -1;
}

/* _read_args(data) -> (read, args): the scalar arguments load_few_args reads from a call's
 * pickle (MAGIC0 stripped), as a tuple (the tests'). */
static PyObject *fast_read_args(PyObject *self, PyObject *data) {
    Py_buffer view;
    PyObject *x[3], *t;
    int k;
    (void)self;

    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    k = load_few_args(view.buf, (size_t)view.len, x);
    PyBuffer_Release(&view);
    if (k < 0) return Py_BuildValue("(OO)", Py_False, Py_None);
    if ((t = PyTuple_New(k)) == NULL) {
        while (k > 0)
            Py_DECREF(x[--k]);
        return NULL;
    }
    for (int i = 0; i < k; i++)
        PyTuple_SetItem(t, i, x[i]); /* (steals) */
    return Py_BuildValue("(ON)", Py_True, t);
}

/* What differs between a plain method's run and a plain task's. */
typedef struct {
    int task; /* a task: no tr_ctx_started; _running_task set while it runs (the main
               * thread's: troupe.cancel's KeyboardInterrupt), the current call unset
               * before its result is replied (as _worker.run_task) */
    PyObject *finish, *failed;
    PyObject *inst, *name; /* a method's: the actor's instance and the method's name (a
                            * task's: NULL, its function given) */
    PyObject *own;         /* a method's: its class's function (methods[name]), called with
                            * the instance first; NULL: looked up as getattr does */
} plain_path;

/* The main thread's task is ctx (or, ctx NULL, none): _running_task[0]. */
static void set_running(const plain_path *path, PyObject *ctxobj) {
    if (!path->task || PyThread_get_thread_ident() != F.main_ident) return;
    Py_INCREF(ctxobj);
    if (PyList_SetItem(F.running, 0, ctxobj) < 0) PyErr_Clear(); /* (steals ctxobj) */
}

/* A failed plain call or task (its error set): _running_task and (a task's) the current
 * call unset (back to prev), as run_task's handler finds them, with the error kept aside
 * meanwhile (no C API call may run with one set). */
static void unset_failed(const plain_path *path, tr_ctx **cur, tr_ctx *prev) {
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    set_running(path, Py_None);
    if (path->task) *cur = prev;
    PyErr_Restore(type, value, tb);
}

/* current_ctx(): the tr_ctx (an int) of the plain call or task this thread runs here,
 * or None (_runtime.current_call_canceled's: the Python paths' is current_call.ctx). */
static PyObject *fast_current_ctx(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    if (current_ctx == NULL) Py_RETURN_NONE;
    return PyLong_FromVoidPtr(current_ctx);
}

/* A plain method's lookup failed (its error set, with no call made): the error
 * _worker.dispatch words it with, and the method loses its mark (its next calls go there). */
static void forget_methods(void);

static void no_method(const plain_path *path) {
    PyObject *tname;

    PyErr_Clear();
    if (PyDict_DelItem(F.methods, path->name) < 0) PyErr_Clear();
    forget_methods();
    if ((tname = PyType_GetName(Py_TYPE(path->inst))) == NULL) return;
    PyErr_Format(PyExc_AttributeError, "'%U' actor has no method '%U'", tname, path->name);
    Py_DECREF(tname);
}

/* The actor's method path->name called with a (kw: NULL or a dict), or a task's fn, as
 * _worker.dispatch calls it. A method with no keywords and up to 4 arguments is called
 * with no bound method made: its class's function (path->own) with the instance first
 * (~30-50 ns less than a lookup here), or looked up as getattr does
 * (PyObject_CallMethodObjArgs: ~80 ns of a ~900 ns dispatch); where the lookup, not the
 * method, failed (the instance has no such callable now), the error is dispatch's
 * (no_method). */
static PyObject *call_target(const plain_path *path, PyObject *fn, PyObject *a, PyObject *kw) {
    PyObject *x[5] = {NULL, NULL, NULL, NULL, NULL}, *r, *now;
    Py_ssize_t n = PyTuple_Size(a);

    if (kw != NULL && PyDict_Size(kw) == 0) kw = NULL;
    if (path->inst == NULL) return PyObject_Call(fn, a, kw);
    if (path->own != NULL && kw == NULL && n <= 4) {
        x[0] = path->inst;
        for (Py_ssize_t i = 0; i < n; i++)
            x[i + 1] = PyTuple_GetItem(a, i);
        return PyObject_Vectorcall(path->own, x, (size_t)n + 1, NULL);
    }
    if (path->own != NULL) { /* (keywords, or more arguments: its bound method) */
        PyObject *all = PyTuple_New(n + 1);
        if (all == NULL) return NULL;
        Py_INCREF(path->inst);
        PyTuple_SetItem(all, 0, path->inst); /* (steals) */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyTuple_GetItem(a, i);
            Py_INCREF(v);
            PyTuple_SetItem(all, i + 1, v);
        }
        r = PyObject_Call(path->own, all, kw);
        Py_DECREF(all);
        return r;
    }
    if (kw != NULL || n > 4) {
        if ((fn = PyObject_GetAttr(path->inst, path->name)) == NULL || fn == Py_None) {
            Py_XDECREF(fn);
            no_method(path);
            return NULL;
        }
        r = PyObject_Call(fn, a, kw);
        Py_DECREF(fn);
        return r;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        x[i] = PyTuple_GetItem(a, i);
    r = n == 0   ? PyObject_CallMethodObjArgs(path->inst, path->name, NULL)
        : n == 1 ? PyObject_CallMethodObjArgs(path->inst, path->name, x[0], NULL)
        : n == 2 ? PyObject_CallMethodObjArgs(path->inst, path->name, x[0], x[1], NULL)
        : n == 3 ? PyObject_CallMethodObjArgs(path->inst, path->name, x[0], x[1], x[2], NULL)
                 : PyObject_CallMethodObjArgs(path->inst, path->name, x[0], x[1], x[2], x[3], NULL);
    if (r != NULL ||
        !(PyErr_ExceptionMatches(PyExc_AttributeError) || PyErr_ExceptionMatches(PyExc_TypeError)))
        return r;
    /* (the method's own AttributeError or TypeError, or the lookup's: looked at again) */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if ((now = PyObject_GetAttr(path->inst, path->name)) != NULL && now != Py_None) {
        Py_DECREF(now);
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    Py_XDECREF(now);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    no_method(path);
    return NULL;
}

/* The body of a plain call (GIL held) of fn (a task's) or of the method path names, in
 * _worker's order (dispatch's, or run_task's for a task): tr_ctx_started (a method), the
 * arguments (refs resolved), the call, its result. A Python error anywhere goes to
 * _worker's handlers, as the function's own does. */
static int run_plain(tr_ctx *ctx, PyObject *fn, const char *payload, size_t len,
                     const plain_path *path) {
    PyObject *ctxobj = NULL, *both = NULL, *args_only = NULL, *empty_kw = NULL, *a, *kw,
             *result = NULL, *r;
    /* (current_ctx's address looked up once: each access of a thread-local of a shared
     * object is a call of __tls_get_addr, ~20 ns a call in all here) */
    tr_ctx **cur = &current_ctx, *prev = *cur; /* (what this thread ran before: restored) */
    int rc;

    if (path->task && ctx_object(ctx, &ctxobj) == NULL) { /* (set_running's, now) */
        PyErr_Clear();
        return TR_ETASK;
    }
    if (!path->task)
        F.ctx_started(ctx);    /* (before the arguments: unpickling may run the user's code) */
    *cur = ctx;                /* (troupe's current call here: _runtime.current_call_canceled) */
    set_running(path, ctxobj); /* (from here: the arguments' refs may wait) */
    /* up to 3 scalars: its class's function called on them read in place, no args tuple
     * made and freed */
    if (path->own != NULL) {
        PyObject *x[4];
        int k = load_few_args((const unsigned char *)payload + MAGIC_LEN, len - MAGIC_LEN, x + 1);
        if (k >= 0) {
            x[0] = path->inst;
            result = PyObject_Vectorcall(path->own, x, (size_t)k + 1, NULL);
            for (int i = 1; i <= k; i++)
                Py_DECREF(x[i]);
            if (result == NULL) goto failed;
            goto ran;
        }
    }
    if ((args_only = load_args_only(payload + MAGIC_LEN, len - MAGIC_LEN)) != NULL) {
        a = args_only, kw = NULL; /* (no keywords) */
    } else {
        if ((both = load_plain(payload + MAGIC_LEN, len - MAGIC_LEN)) == NULL) goto failed;
        if (!PyTuple_Check(both) || PyTuple_Size(both) != 2 ||
            !PyTuple_Check(PyTuple_GetItem(both, 0)) || !PyDict_Check(PyTuple_GetItem(both, 1))) {
            PyErr_SetString(PyExc_TypeError, "troupe: a call's arguments are not (args, kwargs)");
            goto failed;
        }
        a = PyTuple_GetItem(both, 0), kw = PyTuple_GetItem(both, 1);
    }
    if (has_arg_refs(a, kw)) { /* their values (_worker.resolve) */
        if (kw == NULL && (kw = empty_kw = PyDict_New()) == NULL) goto failed;
        if (ctx_object(ctx, &ctxobj) == NULL ||
            (r = PyObject_CallFunctionObjArgs(F.resolve, ctxobj, a, kw, NULL)) == NULL)
            goto failed;
        SETREF(both, r);
        if (!PyTuple_Check(both) || PyTuple_Size(both) != 2 ||
            !PyTuple_Check(PyTuple_GetItem(both, 0)) || !PyDict_Check(PyTuple_GetItem(both, 1))) {
            PyErr_SetString(PyExc_TypeError, "troupe: resolve gave no (args, kwargs)");
            goto failed;
        }
        a = PyTuple_GetItem(both, 0), kw = PyTuple_GetItem(both, 1);
    }
    if ((result = call_target(path, fn, a, kw)) == NULL) goto failed;
ran:
    set_running(path, Py_None);
    if (path->task) *cur = prev;
    if ((rc = reply_result(ctx, &ctxobj, result, path->finish)) == -1) goto failed;
    goto out;
failed:
    unset_failed(path, cur, prev);
    rc = hand_failure(ctx, &ctxobj, path->failed);
out:
    *cur = prev;
    Py_XDECREF(result);
    Py_XDECREF(both);
    Py_XDECREF(args_only);
    Py_XDECREF(empty_kw);
    Py_XDECREF(ctxobj);
    return rc;
}

/* The last plain method found (an actor's calls are mostly of one or two): its name's str,
 * the instance, its class's function (or NULL), until methods or state["instance"] change
 * (forget_methods: _worker's methods_changed, no_method). */
static struct { PyObject *key, *inst, *own; } found;

static void forget_methods(void) {
    PyObject *key = found.key, *inst = found.inst, *own = found.own;

    found.key = found.inst = found.own = NULL; /* (then: a dealloc may run Python code) */
    Py_XDECREF(key);
    Py_XDECREF(inst);
    Py_XDECREF(own);
}

/* methods_changed(): _worker changed methods or state["instance"]. */
static PyObject *fast_methods_changed(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    forget_methods();
    Py_RETURN_NONE;
}

/* The method name's str where the Python side marked it plain and the actor has its
 * instance (*inst: a new reference, as the name and *own: the class's function, or NULL
 * where it is looked up as getattr does), else NULL with no error set: the call takes
 * the ctypes dispatch. (Whether the instance still has a method looked up is found as it
 * is called: call_target.) */
static PyObject *plain_method(const char *name, PyObject **inst, PyObject **own) {
    static PyObject *last; /* the last name's str */
    PyObject *key, *in, *mark;
    const char *s;

    if (found.key != NULL && (s = PyUnicode_AsUTF8AndSize(found.key, NULL)) != NULL &&
        strcmp(s, name) == 0) { /* (two dict lookups less) */
        Py_INCREF(found.key), Py_INCREF(found.inst), Py_XINCREF(found.own);
        *inst = found.inst, *own = found.own;
        return found.key;
    }
    if (last != NULL && (s = PyUnicode_AsUTF8AndSize(last, NULL)) != NULL && strcmp(s, name) == 0) {
        key = last;
        Py_INCREF(key);
    } else if ((key = PyUnicode_FromString(name)) != NULL) {
        Py_INCREF(key);
        SETREF(last, key);
    } else {
        goto none;
    }
    if ((mark = PyDict_GetItemWithError(F.methods, key)) == NULL) goto none;
    in = PyDict_GetItemWithError(F.state, F.s_instance); /* borrowed */
    if (in == NULL || in == Py_None) goto none;
    Py_INCREF(in);
    *inst = in;
    *own = mark == Py_True ? NULL : mark;
    Py_XINCREF(*own);
    forget_methods();
    Py_INCREF(key), Py_INCREF(in), Py_XINCREF(*own);
    found.key = key, found.inst = in, found.own = *own;
    return key;
none:
    PyErr_Clear();
    Py_XDECREF(key);
    return NULL;
}

/* Input i of a graph step: 0 its call's arguments, i > 0 its ref i - 1. 0, or the rc. */
static int step_input(tr_ctx *ctx, const void *args, size_t len, size_t i, const void **data,
                      size_t *n) {
    if (i == 0) {
        *data = args, *n = len;
        return 0;
    }
    return F.ctx_ref(ctx, i - 1, data, n);
}

/* Whether each of a step's n_in inputs is a plain pickle (no buffer, no upstream error):
 * only then is the step run here, before any of them is unpickled. */
static int step_inputs_plain(tr_ctx *ctx, const void *args, size_t len, size_t n_in) {
    const void *d;
    size_t n;

    for (size_t i = 0; i < n_in; i++)
        if (step_input(ctx, args, len, i, &d, &n) != 0 || n < MAGIC_LEN ||
            memcmp(d, MAGIC0, MAGIC_LEN) != 0)
            return 0;
    return 1;
}

/* A plain graph step (GIL held) of the instance's method fn, as _worker.dispatch runs a
 * step: its inputs unpickled, its call's arguments by step_args(spec, values), the call,
 * its result replied (a builtin scalar here, any other by finish), an error by failed. */
static int run_step(tr_ctx *ctx, PyObject *fn, PyObject *spec, const void *args, size_t len,
                    size_t n_in) {
    PyObject *ctxobj, *vals, *both = NULL, *result = NULL, *v;
    const void *d;
    size_t n;
    int rc;

    if ((ctxobj = PyLong_FromVoidPtr(ctx)) == NULL) return TR_ETASK;
    if ((vals = PyList_New((Py_ssize_t)n_in)) == NULL) goto failed;
    for (size_t i = 0; i < n_in; i++) {
        if ((rc = step_input(ctx, args, len, i, &d, &n)) != 0) {
            PyErr_Format(PyExc_RuntimeError, "troupe: a graph step's input %zu: rc %d", i, rc);
            goto failed;
        }
        if ((v = load_plain((const char *)d + MAGIC_LEN, n - MAGIC_LEN)) == NULL) goto failed;
        PyList_SetItem(vals, (Py_ssize_t)i, v); /* (steals v) */
    }
    both = PyObject_CallFunctionObjArgs(F.step_args, spec, vals, NULL);
    if (both == NULL) goto failed;
    if (!PyTuple_Check(both) || PyTuple_Size(both) != 2 ||
        !PyTuple_Check(PyTuple_GetItem(both, 0)) || !PyDict_Check(PyTuple_GetItem(both, 1))) {
        PyErr_SetString(PyExc_TypeError, "troupe: step_args gave no (args, kwargs)");
        goto failed;
    }
    PyObject *kw = PyTuple_GetItem(both, 1);
    result = PyObject_Call(fn, PyTuple_GetItem(both, 0), PyDict_Size(kw) ? kw : NULL);
    if (result == NULL || (rc = reply_result(ctx, &ctxobj, result, F.finish)) == -1) goto failed;
    goto out;
failed:
    rc = hand_failure(ctx, &ctxobj, F.failed);
out:
    Py_XDECREF(result);
    Py_XDECREF(both);
    Py_XDECREF(vals);
    Py_DECREF(ctxobj);
    return rc;
}

/* The instance's method of a graph step the Python side marked plain (F.steps: name ->
 * (method, spec)), with *spec (both new references), else NULL with no error set. */
static PyObject *plain_step(const char *name, PyObject **spec) {
    PyObject *key, *entry, *inst, *fn = NULL;

    if ((key = PyUnicode_FromString(name)) == NULL) goto none;
    entry = PyDict_GetItemWithError(F.steps, key); /* borrowed */
    Py_DECREF(key);
    if (entry == NULL || !PyTuple_Check(entry) || PyTuple_Size(entry) != 2) goto none;
    Py_INCREF(entry);
    inst = PyDict_GetItemWithError(F.state, F.s_instance); /* borrowed */
    if (inst != NULL && inst != Py_None) {
        Py_INCREF(inst);
        fn = PyObject_GetAttr(inst, PyTuple_GetItem(entry, 0));
        Py_DECREF(inst);
    }
    if (fn != NULL && fn != Py_None) {
        *spec = PyTuple_GetItem(entry, 1);
        Py_INCREF(*spec);
        Py_DECREF(entry);
        return fn;
    }
    Py_XDECREF(fn);
    Py_DECREF(entry);
none: /* (the Python dispatch says why, its own way) */
    PyErr_Clear();
    return NULL;
}

/* Takes the GIL, keeping a thread state for the thread's life (as _worker.pin_thread). */
static PyGILState_STATE enter(void) {
    PyGILState_STATE g = PyGILState_Ensure();
    if (!pinned) {
        PyGILState_Ensure();
        pinned = 1;
    }
    return g;
}

/* The actor class's idle (tr_actor_class.idle): the GIL this thread kept since its last
 * plain call goes, before the thread waits for anything. */
static void fast_idle(void) {
    if (!kept) return;
    kept = 0;
    PyGILState_Release(PyGILState_UNLOCKED);
}

/* The actor class's dispatch (tr_method_fn): a plain call of a method the Python side
 * marked plain runs here; every other goes to the ctypes dispatch as before. A plain
 * call's thread keeps the GIL it took (or kept) until the class's idle: the next call that
 * comes within the worker's poll takes none (taking it anew each time cost a sync call
 * 50-110 ns of ~1 us here). */
static int fast_dispatch(tr_ctx *ctx, void *self, const void *args, size_t len) {
    static const plain_path method = {0, NULL, NULL, NULL, NULL, NULL};
    const char *name = F.ctx_method(ctx);
    PyGILState_STATE g;
    PyObject *fn, *inst = NULL, *own = NULL;
    int rc;

    if (name == NULL || len < MAGIC_LEN || memcmp(args, MAGIC0, MAGIC_LEN) != 0)
        return F.slow(ctx, self, args, len);
    if (strncmp(name, STEP_PREFIX, sizeof STEP_PREFIX - 1) == 0) { /* a graph's step */
        PyObject *spec = NULL;
        size_t n_in = 1 + F.ctx_num_refs(ctx);
        if (!step_inputs_plain(ctx, args, len, n_in)) return F.slow(ctx, self, args, len);
        g = enter();
        if ((fn = plain_step(name, &spec)) == NULL) {
            PyGILState_Release(g);
            return F.slow(ctx, self, args, len);
        }
        rc = run_step(ctx, fn, spec, args, len, n_in);
        Py_DECREF(spec);
        Py_DECREF(fn);
        PyGILState_Release(g);
        return rc;
    }
    if (kept)
        kept = 0, g = PyGILState_UNLOCKED; /* (held since the last: its Ensure's state) */
    else
        g = enter();
    if ((fn = plain_method(name, &inst, &own)) == NULL) {
        PyGILState_Release(g);
        return F.slow(ctx, self, args, len);
    }
    plain_path path = method;
    path.finish = F.finish, path.failed = F.failed, path.inst = inst, path.name = fn;
    path.own = own;
    rc = run_plain(ctx, NULL, (const char *)args, len, &path);
    Py_DECREF(inst);
    Py_XDECREF(own);
    Py_DECREF(fn);
    if (g == PyGILState_UNLOCKED)
        kept = 1; /* (taken here, not nested in Python code: the class's idle lets it go) */
    else
        PyGILState_Release(g);
    return rc;
}

/* A task's payload (remote_function: HEAD, then the function's bytes unless they are in
 * the store, then the arguments). */
#define TASK_MAGIC "TRPT"
#define TASK_HEAD 24 /* struct "<4s16sI": magic, digest, n_fn */
#define DIGEST_AT 4
#define DIGEST_LEN 16
#define FN_IN_REF 0xFFFFFFFFu

/* The task dispatch (tr_task_fn): a task of a function the Python side marked plain
 * (F.tasks, by its digest), whose arguments are a plain pickle, runs here; every other
 * goes to the ctypes dispatch as before (which unpickles and caches the function). */
static int fast_task(tr_ctx *ctx, const void *args, size_t len) {
    const unsigned char *p = args;
    PyGILState_STATE g;
    PyObject *key, *fn;
    uint32_t n_fn;
    size_t off;
    int rc;

    if (len < TASK_HEAD || memcmp(p, TASK_MAGIC, 4) != 0) return F.task_slow(ctx, args, len);
    n_fn = (uint32_t)p[20] | (uint32_t)p[21] << 8 | (uint32_t)p[22] << 16 | (uint32_t)p[23] << 24;
    if (n_fn != FN_IN_REF && n_fn > len - TASK_HEAD) return F.task_slow(ctx, args, len);
    off = TASK_HEAD + (n_fn == FN_IN_REF ? 0 : n_fn);
    if (len - off < MAGIC_LEN || memcmp(p + off, MAGIC0, MAGIC_LEN) != 0)
        return F.task_slow(ctx, args, len);
    g = enter();
    fn = NULL;
    if ((key = PyBytes_FromStringAndSize((const char *)p + DIGEST_AT, DIGEST_LEN)) != NULL) {
        fn = PyDict_GetItemWithError(F.tasks, key); /* borrowed */
        Py_XINCREF(fn);
        Py_DECREF(key);
    }
    if (fn == NULL) {
        PyErr_Clear();
        PyGILState_Release(g);
        return F.task_slow(ctx, args, len);
    }
    plain_path path = {1, F.task_finish, F.task_failed, NULL, NULL, NULL};
    rc = run_plain(ctx, fn, (const char *)p + off, len - off, &path);
    Py_DECREF(fn);
    PyGILState_Release(g);
    return rc;
}

/* worker_configure(slow_method, slow_task, objs): the worker's dispatches; returns the
 * addresses of fast_dispatch (the actor class's) and fast_task (the task dispatch), each
 * taking what it does not run to the slow one (the ctypes callbacks' addresses). objs:
 * state, methods, current, ArgRef, resolve, finish, failed; tasks, running, task_finish,
 * task_failed; steps, step_args. Called from the worker's main thread. */
static PyObject *fast_worker_configure(PyObject *self, PyObject *args) {
    PyObject *slow, *slow_task, *objs;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO!", &slow, &slow_task, &PyDict_Type, &objs)) return NULL;
    if (!F.ready) return PyErr_Format(PyExc_RuntimeError, "troupe._fast: configure() first");
    F.slow = (tr_method_fn)PyLong_AsVoidPtr(slow);
    F.task_slow = (tr_task_fn)PyLong_AsVoidPtr(slow_task);
    if (F.slow == NULL || F.task_slow == NULL)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "a slow path is NULL");
    if (!get_obj(objs, "state", &F.state) || !get_obj(objs, "methods", &F.methods) ||
        !get_obj(objs, "ArgRef", &F.arg_ref) || !get_obj(objs, "resolve", &F.resolve) ||
        !get_obj(objs, "finish", &F.finish) || !get_obj(objs, "failed", &F.failed) ||
        !get_obj(objs, "tasks", &F.tasks) || !get_obj(objs, "running", &F.running) ||
        !get_obj(objs, "task_finish", &F.task_finish) ||
        !get_obj(objs, "task_failed", &F.task_failed) || !get_obj(objs, "steps", &F.steps) ||
        !get_obj(objs, "step_args", &F.step_args))
        return NULL;
    if (!PyDict_Check(F.state) || !PyDict_Check(F.methods) || !PyDict_Check(F.tasks) ||
        !PyDict_Check(F.steps))
        return PyErr_Format(PyExc_TypeError, "troupe._fast: state, methods, tasks, steps: dicts");
    if (!PyList_Check(F.running) || PyList_Size(F.running) != 1)
        return PyErr_Format(PyExc_TypeError, "troupe._fast: running is a list of one");
    F.main_ident = PyThread_get_thread_ident();
    return Py_BuildValue("(NNN)", PyLong_FromVoidPtr((void *)fast_dispatch),
                         PyLong_FromVoidPtr((void *)fast_task),
                         PyLong_FromVoidPtr((void *)fast_idle));
}

static PyMethodDef fast_methods[] = {
    {"configure", fast_configure, METH_VARARGS, "configure(addrs, objs)"},
    {"call_one", (PyCFunction)(void (*)(void))fast_call_one, METH_FASTCALL,
     "call_one(actor_id, method, args, kwargs, class_name) -> ObjectRef or None"},
    {"task_one", (PyCFunction)(void (*)(void))fast_task_one, METH_FASTCALL,
     "task_one(rt, c_name, head, options_address, args, kwargs, function_name) -> ObjectRef "
     "or None"},
    {"_write_plain", fast_write_plain, METH_VARARGS, "_write_plain(args, kwargs) -> bytes or None"},
    {"_read_plain", fast_read_plain, METH_O, "_read_plain(data) -> (read, value)"},
    {"_read_args", fast_read_args, METH_O, "_read_args(data) -> (read, args)"},
    {"get", (PyCFunction)(void (*)(void))fast_get, METH_FASTCALL,
     "get(refs, slow) -> value, [value, ...] or not_taken"},
    {"current_ctx", fast_current_ctx, METH_NOARGS, "current_ctx() -> int or None"},
    {"flush", fast_flush, METH_NOARGS, "flush(): the releases put off, done now"},
    {"set_runtime", fast_set_runtime, METH_O, "set_runtime(rt): _runtime._rt is now rt"},
    {"methods_changed", fast_methods_changed, METH_NOARGS,
     "methods_changed(): the worker's plain methods or its instance changed"},
    {"set_exit_requested", fast_set_exit_requested, METH_NOARGS,
     "set_exit_requested(): exit_actor() was called here"},
    {"pending", fast_pending, METH_NOARGS, "pending() -> the ids (bytes) whose releases wait"},
    {"worker_configure", fast_worker_configure, METH_VARARGS,
     "worker_configure(slow_method, slow_task, objs) -> (method dispatch, task dispatch)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fast_module = {
    PyModuleDef_HEAD_INIT,
    "troupe._fast",
    "The plain call's two ends in C.",
    -1,
    fast_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fast(void) {
    PyObject *m = PyModule_Create(&fast_module), *base, *remote = NULL, *getter = NULL;

    if (m == NULL) return NULL;
    if ((base = PyType_FromSpec(&ref_spec)) == NULL || PyModule_AddObject(m, "RefBase", base) < 0) {
        Py_XDECREF(base);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(base); /* (AddObject stole one) */
    SETREF(F.base_type, base);
    if ((hold_lock_type = PyType_FromSpec(&hl_spec)) == NULL ||
        (remote = PyType_FromSpec(&remote_spec)) == NULL ||
        (getter = PyType_FromSpec(&getter_spec)) == NULL ||
        PyModule_AddObject(m, "HoldLock", hold_lock_type) < 0 ||
        PyModule_AddObject(m, "Remote", remote) < 0) {
        Py_XDECREF(remote);
        Py_XDECREF(getter);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "Get", getter) < 0) {
        Py_DECREF(getter);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(hold_lock_type); /* (kept here too: AddObject stole one) */
    return m;
}
