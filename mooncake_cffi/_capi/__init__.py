"""The C boundary: everything that touches the shim's ``lib``.

* :mod:`.cdef` reads the cffi declarations out of ``mcs.h`` (their one source);
* :mod:`.binding` loads ``libmcs.so`` (``ffi``, ``lib``), checks its ABI version, hands it
  Mooncake's ``store.so``, and turns a status code into an exception (:func:`.binding.check`);
* :mod:`.native` owns one shim client handle and its life (:class:`.native.NativeClient`);
* :mod:`.marshal` packs keys, buffers and results into ``mcs_batch`` structs;
* :mod:`.pointers` turns buffers and addresses into cdata;
* :mod:`.replica_options` carries a ReplicateConfig across as ``mcs_replica_options``;
* :mod:`.counters` reads the per-lane, per-operation and integrity counters.
"""
