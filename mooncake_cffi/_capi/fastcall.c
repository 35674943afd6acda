/* mooncake_cffi._capi._fastcall: the calls on keys alone (exists, size,
 * remove) of one key or a list of keys, each in one C function, for
 * Runner.one_now and Runner.keys_now; and the drop-in's batch lookup whole
 * (Lookups, for Runner.lookups).
 *
 * Through cffi the same calls cost Python work on both sides: the keys encoded
 * (one bytes object, or a join of all of them), the arguments converted, the
 * results read back from a reused array guarded against re-entry and turned
 * into a list.  Right after a round trip each of those costs several times its
 * warm time.  Here the keys' UTF-8 is read where each str keeps it, the
 * results land in memory of the call's own (nothing shared, so nothing to
 * guard), and the GIL is released around the shim's call exactly as cffi
 * releases it.  Everything else (which calls may come here, the errors) stays
 * in Runner, and in the drop-in's fail-open layer for Lookups. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <time.h>

#include "mcs.h"

/* The arguments both functions start with: (handle, op, flags, ...), four in all.
 * 0, or -1 with the Python error set. */
static int call_args(const char *name, PyObject *const *args, Py_ssize_t nargs, void **handle,
                     int *op, int *flags) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "%s takes 4 arguments (%zd given)", name, nargs);
        return -1;
    }
    *handle = PyLong_AsVoidPtr(args[0]);
    if (*handle == NULL && PyErr_Occurred()) return -1;
    *op = PyLong_AsLong(args[1]);
    if (*op == -1 && PyErr_Occurred()) return -1;
    *flags = PyLong_AsLong(args[2]);
    if (*flags == -1 && PyErr_Occurred()) return -1;
    return 0;
}

/* run_one(handle, op, flags, key) -> the key's result (int), (status,) when the
 * shim refused the call, or None when key is not a str it can encode (the
 * general way then says why).  handle: the client's address as an int (0 for a
 * closed client: the shim answers MCS_E_INVALID_HANDLE). */
static PyObject *run_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    void *handle;
    int op, flags;
    if (call_args("run_one", args, nargs, &handle, &op, &flags)) return NULL;
    if (!PyUnicode_CheckExact(args[3])) Py_RETURN_NONE;
    Py_ssize_t len = 0;
    /* Borrowed from the str (kept by the caller for the whole call). */
    const char *key = PyUnicode_AsUTF8AndSize(args[3], &len);
    if (key == NULL) {
        PyErr_Clear(); /* e.g. a lone surrogate: not encodable */
        Py_RETURN_NONE;
    }
    int64_t result = 0;
    PyThreadState *ts = PyEval_SaveThread();
    int rc =
        mcs_client_run_one((mcs_client *)handle, &result, op, flags, key, (uint64_t)len, NULL, 0);
    PyEval_RestoreThread(ts);
    if (rc != 0) return Py_BuildValue("(i)", rc);
    return PyLong_FromLongLong(result);
}

/* The keys of a list, NUL-separated, in *data (PyMem_Malloc'd, *total bytes):
 * 1 when packed, 0 when one is not a str it can encode (nothing allocated, no
 * error set), -1 with the Python error set. */
static int pack_keys(PyObject *keys, Py_ssize_t n, char **data, size_t *total) {
    /* First pass: every key a str that encodes, and the bytes they take. */
    size_t bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_ssize_t len = 0;
        if (!PyUnicode_CheckExact(k) || PyUnicode_AsUTF8AndSize(k, &len) == NULL) {
            PyErr_Clear();
            return 0;
        }
        bytes += (size_t)len + 1;
    }
    char *at = *data = PyMem_Malloc(bytes);
    if (at == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Second pass: copy them, NUL-separated (the list cannot change in between:
     * the GIL is held, and the UTF-8 of each str is cached by the first pass). */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = 0;
        const char *k = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(keys, i), &len);
        memcpy(at, k, (size_t)len);
        at += len;
        *at++ = '\0';
    }
    *total = bytes;
    return 1;
}

/* n results as a new list of ints, or NULL with the Python error set. */
static PyObject *results_list(const int64_t *results, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyLong_FromLongLong(results[i]);
        if (r == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, r);
    }
    return out;
}

/* keys_call's answers that are not the shim's (whose are 0 or negative). */
enum { NOT_KEYS = 1, PY_ERROR = 2 };

/* The n keys of a list through mcs_client_run_keys, the GIL released around
 * it: the shim's status, with the results in `results` (n of them);
 * NOT_KEYS when a key is not a str it can encode, PY_ERROR with the Python
 * error set. */
static int keys_call(void *handle, int op, int flags, PyObject *keys, Py_ssize_t n,
                     int64_t *results) {
    char *data = NULL;
    size_t total = 0;
    int packed = pack_keys(keys, n, &data, &total);
    if (packed <= 0) return packed == 0 ? NOT_KEYS : PY_ERROR;
    PyThreadState *ts = PyEval_SaveThread();
    int rc = mcs_client_run_keys((mcs_client *)handle, results, op, flags, data, (uint64_t)total,
                                 (uint64_t)n);
    PyEval_RestoreThread(ts);
    PyMem_Free(data);
    return rc;
}

/* run_keys(handle, op, flags, keys) -> a list of the keys' results (ints),
 * (status,) when the shim refused the batch, or None when keys is not a list
 * of str it can encode (the general way then answers).  The keys are copied,
 * NUL-separated, before the GIL is released. */
static PyObject *run_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    void *handle;
    int op, flags;
    if (call_args("run_keys", args, nargs, &handle, &op, &flags)) return NULL;
    PyObject *keys = args[3];
    if (!PyList_CheckExact(keys)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (n == 0) return PyList_New(0);
    int64_t *results = PyMem_Calloc((size_t)n, sizeof(int64_t));
    if (results == NULL) return PyErr_NoMemory();
    PyObject *out = NULL;
    int rc = keys_call(handle, op, flags, keys, n, results);
    if (rc == NOT_KEYS) {
        out = Py_NewRef(Py_None);
    } else if (rc < 0) {
        out = Py_BuildValue("(i)", rc);
    } else if (rc == 0) {
        out = results_list(results, n);
    }
    PyMem_Free(results);
    return out;
}

/* ---- Lookups: the drop-in's lookups, whole --------------------------------
 *
 * Lookups(native, breaker, live, health, rest) is called with a list of keys
 * (batch_is_exist); Lookups(..., one=True) with one str key (is_exist).
 * While the breaker is closed and every storage node is known up it is the
 * lookup whole: one master round trip, the list of 1 / 0 answers or the one
 * answer.  What it reads, by name:
 *
 *   before the call  native.address (0: closed), native.orphans (a dict: while
 *                    timed-out batches wait to be reaped, the general way
 *                    runs), breaker.open (falsy);
 *   after it         every result >= 0, and (for a list, or one key's 1) the
 *                    clock (CLOCK_MONOTONIC, as time.monotonic) before both
 *                    live.discover_at and health.up_until (LiveHits.trusted,
 *                    the same test).
 *
 * Anything else goes to rest(keys, raw, started), which answers: raw is None
 * when nothing ran (the general way: not one encodable str nor a list of at
 * least two, closed, orphans, breaker open), (status,) when the shim refused
 * the call, or the result(s) to be checked; started is the clock before the
 * call.  The object holds what it reads and nothing of the store, so a store
 * dropped without close() still goes at once (no cycle through here). */

typedef struct {
    PyObject ob_base; /* PyObject_HEAD */
    PyObject *native;
    PyObject *breaker;
    PyObject *live;
    PyObject *health;
    PyObject *rest;
    int one; /* is_exist's: one str key */
    vectorcallfunc vectorcall;
} Lookups;

static PyObject *s_address, *s_orphans, *s_open, *s_discover_at, *s_up_until;

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The float attribute `name` of `obj` is above `now`: 1, 0, or -1 with the
 * Python error set. */
static int before(PyObject *obj, PyObject *name, double now) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    double until = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (until == -1.0 && PyErr_Occurred()) return -1;
    return now < until;
}

/* Whether the lookup may run here: 1, 0 (the general way), -1 with the error
 * set.  *handle: the client's. */
static int lookups_ready(Lookups *self, void **handle) {
    PyObject *v = PyObject_GetAttr(self->native, s_address);
    if (v == NULL) return -1;
    *handle = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    if (*handle == NULL) return PyErr_Occurred() ? -1 : 0;
    v = PyObject_GetAttr(self->native, s_orphans);
    if (v == NULL) return -1;
    Py_ssize_t waiting = PyObject_Length(v);
    Py_DECREF(v);
    if (waiting) return waiting < 0 ? -1 : 0;
    v = PyObject_GetAttr(self->breaker, s_open);
    if (v == NULL) return -1;
    int open = PyObject_IsTrue(v);
    Py_DECREF(v);
    return open < 0 ? -1 : !open;
}

static PyObject *lookups_rest(Lookups *self, PyObject *keys, PyObject *raw, double started) {
    PyObject *at = PyFloat_FromDouble(started);
    if (at == NULL) return NULL;
    PyObject *args[3] = {keys, raw, at};
    PyObject *out = PyObject_Vectorcall(self->rest, args, 3, NULL);
    Py_DECREF(at);
    return out;
}

/* Whether a lookup that answered now may stand without a check: 1, 0, or -1
 * with the Python error set (LiveHits.trusted's test). */
static int trusted(Lookups *self) {
    double now = monotonic_now();
    int clear = before(self->live, s_discover_at, now);
    return clear > 0 ? before(self->health, s_up_until, now) : clear;
}

/* One str key (is_exist) through mcs_client_run_one: its result as an int
 * when it may stand, or rest's answer. */
static PyObject *lookup_one(Lookups *self, PyObject *key) {
    void *handle = NULL;
    int ready = lookups_ready(self, &handle);
    if (ready < 0) return NULL;
    Py_ssize_t len = 0;
    const char *k = ready ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
    if (k == NULL) {
        PyErr_Clear(); /* not ready, or not encodable (a lone surrogate) */
        return lookups_rest(self, key, Py_None, 0.0);
    }
    int64_t result = 0;
    double started = monotonic_now();
    PyThreadState *ts = PyEval_SaveThread();
    int rc = mcs_client_run_one((mcs_client *)handle, &result, MCS_OP_EXISTS, 0, k, (uint64_t)len,
                                NULL, 0);
    PyEval_RestoreThread(ts);
    PyObject *raw = rc ? Py_BuildValue("(i)", rc) : PyLong_FromLongLong(result);
    if (raw == NULL) return NULL;
    int clear = rc == 0 && result >= 0;
    if (clear && result == 1 && (clear = trusted(self)) < 0) {
        Py_DECREF(raw);
        return NULL;
    }
    if (clear) return raw;
    PyObject *out = lookups_rest(self, key, raw, started);
    Py_DECREF(raw);
    return out;
}

static PyObject *lookups_call(PyObject *op, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
    Lookups *self = (Lookups *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "Lookups takes one argument, a key or a list of keys");
        return NULL;
    }
    PyObject *keys = args[0];
    if (self->one) {
        if (PyUnicode_CheckExact(keys)) return lookup_one(self, keys);
        return lookups_rest(self, keys, Py_None, 0.0);
    }
    void *handle = NULL;
    int ready = 0;
    if (PyList_CheckExact(keys) && PyList_GET_SIZE(keys) >= 2) {
        ready = lookups_ready(self, &handle);
        if (ready < 0) return NULL;
    }
    if (!ready) return lookups_rest(self, keys, Py_None, 0.0);
    Py_ssize_t n = PyList_GET_SIZE(keys);
    int64_t *results = PyMem_Calloc((size_t)n, sizeof(int64_t));
    if (results == NULL) return PyErr_NoMemory();
    double started = monotonic_now();
    int rc = keys_call(handle, MCS_OP_EXISTS, 0, keys, n, results);
    PyObject *raw = NULL; /* rest's, or the answer */
    int clear = rc == 0;
    if (rc == 0) {
        for (Py_ssize_t i = 0; i < n && clear; i++) clear = results[i] >= 0;
        raw = results_list(results, n);
    } else if (rc == NOT_KEYS) {
        raw = Py_NewRef(Py_None);
    } else if (rc != PY_ERROR) {
        raw = Py_BuildValue("(i)", rc);
    }
    PyMem_Free(results);
    if (raw == NULL) return NULL;
    if (clear && (clear = trusted(self)) < 0) {
        Py_DECREF(raw);
        return NULL;
    }
    if (clear) return raw;
    PyObject *out = lookups_rest(self, keys, raw, started);
    Py_DECREF(raw);
    return out;
}

static PyObject *lookups_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *native, *breaker, *live, *health, *rest;
    int one = 0;
    static char *names[] = {"native", "breaker", "live", "health", "rest", "one", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|$p:Lookups", names, &native, &breaker,
                                     &live, &health, &rest, &one))
        return NULL;
    if (!PyCallable_Check(rest)) {
        PyErr_SetString(PyExc_TypeError, "Lookups: rest must be callable");
        return NULL;
    }
    Lookups *self = (Lookups *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->native = Py_NewRef(native);
    self->breaker = Py_NewRef(breaker);
    self->live = Py_NewRef(live);
    self->health = Py_NewRef(health);
    self->rest = Py_NewRef(rest);
    self->one = one;
    self->vectorcall = lookups_call;
    return (PyObject *)self;
}

static int lookups_traverse(Lookups *self, visitproc visit, void *arg) {
    Py_VISIT(self->native);
    Py_VISIT(self->breaker);
    Py_VISIT(self->live);
    Py_VISIT(self->health);
    Py_VISIT(self->rest);
    return 0;
}

static int lookups_clear(Lookups *self) {
    Py_CLEAR(self->native);
    Py_CLEAR(self->breaker);
    Py_CLEAR(self->live);
    Py_CLEAR(self->health);
    Py_CLEAR(self->rest);
    return 0;
}

static void lookups_dealloc(Lookups *self) {
    PyObject_GC_UnTrack(self);
    lookups_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject LookupsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake_cffi._capi._fastcall.Lookups",
    .tp_basicsize = sizeof(Lookups),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc =
        "Lookups(native, breaker, live, health, rest): the drop-in's is_exist and batch_is_exist "
        "in "
        "one C call while the breaker is closed and every storage node is known up; "
        "rest(keys, raw, started) answers otherwise (see fastcall.c).",
    .tp_new = lookups_new,
    .tp_traverse = (traverseproc)lookups_traverse,
    .tp_clear = (inquiry)lookups_clear,
    .tp_dealloc = (destructor)lookups_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Lookups, vectorcall),
};

static PyMethodDef methods[] = {
    {"run_one", (PyCFunction)(void (*)(void))run_one, METH_FASTCALL,
     "run_one(handle, op, flags, key): one str key through mcs_client_run_one without a "
     "buffer; its result, (status,) when refused, None for a key that is not an encodable "
     "str."},
    {"run_keys", (PyCFunction)(void (*)(void))run_keys, METH_FASTCALL,
     "run_keys(handle, op, flags, keys): a list of str keys through mcs_client_run_keys; "
     "their results as a list, (status,) when refused, None for keys that are not a list of "
     "encodable str."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_fastcall",
    "The calls on keys alone, in C (see Runner.one_now, Runner.keys_now and Runner.lookups).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
    if (PyType_Ready(&LookupsType) < 0) return NULL;
    s_address = PyUnicode_InternFromString("address");
    s_orphans = PyUnicode_InternFromString("orphans");
    s_open = PyUnicode_InternFromString("open");
    s_discover_at = PyUnicode_InternFromString("discover_at");
    s_up_until = PyUnicode_InternFromString("up_until");
    if (!s_address || !s_orphans || !s_open || !s_discover_at || !s_up_until) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Lookups", (PyObject *)&LookupsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
