/* mooncake_cffi._capi._fastcall: the single-key call without a buffer (exists,
 * size, remove) in one C function, for Runner.one_now.
 *
 * Through cffi the same call costs Python work on both sides of it: the key's
 * encoding into a new bytes object, eight arguments converted, the result read
 * back from a reused array guarded against re-entry.  Right after a round trip
 * each of those costs several times its warm time.  Here the key's UTF-8 is
 * read where the str keeps it, the result lands on this function's own stack
 * (nothing shared, so nothing to guard), and the GIL is released around the
 * shim's call exactly as cffi releases it.  Everything else (which calls may
 * come here, the errors) stays in Runner. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "mcs.h"

/* run_one(handle, op, flags, key) -> the key's result (int), (status,) when the
 * shim refused the call, or None when key is not a str it can encode (the
 * general way then says why).  handle: the client's address as an int (0 for a
 * closed client: the shim answers MCS_E_INVALID_HANDLE). */
static PyObject *run_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "run_one takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    void *handle = PyLong_AsVoidPtr(args[0]);
    if (handle == NULL && PyErr_Occurred()) return NULL;
    int op = PyLong_AsLong(args[1]);
    if (op == -1 && PyErr_Occurred()) return NULL;
    int flags = PyLong_AsLong(args[2]);
    if (flags == -1 && PyErr_Occurred()) return NULL;
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

static PyMethodDef methods[] = {
    {"run_one", (PyCFunction)(void (*)(void))run_one, METH_FASTCALL,
     "run_one(handle, op, flags, key): one str key through mcs_client_run_one without a "
     "buffer; its result, (status,) when refused, None for a key that is not an encodable "
     "str."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_fastcall",
    "The single-key call without a buffer, in C (see Runner.one_now).",
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
