/* mooncake_cffi._capi._fastcall: the calls on keys alone (exists, size,
 * remove) of one key or a list of keys, each in one C function, for
 * Runner.one_now and Runner.keys_now.
 *
 * Through cffi the same calls cost Python work on both sides: the keys encoded
 * (one bytes object, or a join of all of them), the arguments converted, the
 * results read back from a reused array guarded against re-entry and turned
 * into a list.  Right after a round trip each of those costs several times its
 * warm time.  Here the keys' UTF-8 is read where each str keeps it, the
 * results land in memory of the call's own (nothing shared, so nothing to
 * guard), and the GIL is released around the shim's call exactly as cffi
 * releases it.  Everything else (which calls may come here, the errors) stays
 * in Runner. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

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
    /* First pass: every key a str that encodes, and the bytes they take. */
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_ssize_t len = 0;
        if (!PyUnicode_CheckExact(k) || PyUnicode_AsUTF8AndSize(k, &len) == NULL) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        total += (size_t)len + 1;
    }
    char *data = PyMem_Malloc(total);
    int64_t *results = PyMem_Calloc((size_t)n, sizeof(int64_t));
    if (data == NULL || results == NULL) {
        PyMem_Free(data);
        PyMem_Free(results);
        return PyErr_NoMemory();
    }
    /* Second pass: copy them, NUL-separated (the list cannot change in between:
     * the GIL is held, and the UTF-8 of each str is cached by the first pass). */
    char *at = data;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = 0;
        const char *k = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(keys, i), &len);
        memcpy(at, k, (size_t)len);
        at += len;
        *at++ = '\0';
    }
    PyThreadState *ts = PyEval_SaveThread();
    int rc = mcs_client_run_keys((mcs_client *)handle, results, op, flags, data, (uint64_t)total,
                                 (uint64_t)n);
    PyEval_RestoreThread(ts);
    PyMem_Free(data);
    PyObject *out = NULL;
    if (rc != 0) {
        out = Py_BuildValue("(i)", rc);
    } else if ((out = PyList_New(n)) != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *r = PyLong_FromLongLong(results[i]);
            if (r == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, r);
        }
    }
    PyMem_Free(results);
    return out;
}

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
    "The calls on keys alone, in C (see Runner.one_now and Runner.keys_now).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
    return PyModule_Create(&module);
}
