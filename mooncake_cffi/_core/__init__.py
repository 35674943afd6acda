"""The core that the faces (Client, AsyncClient, the drop-in) share, above the C boundary.

* :mod:`.types` the argument types and the ``DEFAULT`` marker of the public signatures;
* :mod:`.plans` multi-step operations as generators of steps, and deadlines over them;
* :mod:`.blocking` runs steps and plans on the calling thread (:class:`.blocking.BlockingCalls`);
* :mod:`.batches` submitted batches and their completions (``client.batches``);
* :mod:`.values` bytes values in and out, straight or through L1 staging;
* :mod:`.keys` calls on keys alone (exists, size, remove, prefix lookups);
* :mod:`.parts` what a client is made of, declared for the faces built on one;
* :mod:`.staging` and :mod:`.slots` the L1 staging area and its slot allocator.
"""
