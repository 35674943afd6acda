"""A drop-in for Mooncake's own client class: change one import.

    from mooncake_cffi.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

* :mod:`.distributed_store` the class, method for method as Mooncake's;
* :mod:`.setup_args` its ``setup`` forms (positional and dict) and their checks;
* :mod:`.calls` how each method runs: one shim call, Mooncake's answers (the bytes writes
  that are not one key included);
* :mod:`.repair` answering key by key where the shim refuses a batch as a whole;
* :mod:`.buffer_handles` ``BufferHandle`` over Mooncake's own memory;
* :mod:`.tensors` the tensor calls' encoding;
* :mod:`.unset` the argument markers of the methods, and the methods that are absent;
* :mod:`.sessions` Mooncake's session API; :mod:`.replicas` replica descriptors;
  :mod:`.numa` ``bind_to_numa_node``; :mod:`.host_memory` ``MooncakeHostMemAllocator``
  (the shared memory of a client set up with ``setup_dummy``).
"""

from ..replica import ObjectDataType, ReplicateConfig, SoftPinAction
from .buffer_handles import BufferHandle
from .distributed_store import MooncakeDistributedStore
from .host_memory import MooncakeHostMemAllocator
from .numa import bind_to_numa_node
from .replicas import (
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    ReplicaDescriptor,
    ReplicaStatus,
)

__all__ = [
    "BufferHandle",
    "Descriptor",
    "DiskDescriptor",
    "MemoryDescriptor",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "ObjectDataType",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "ReplicateConfig",
    "SoftPinAction",
    "bind_to_numa_node",
]
