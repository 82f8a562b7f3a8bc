"""Keep freed tensor memory in the process instead of giving it back to the OS after every minibatch (glibc): the
lab's measurements get the allocator settings that the training scripts make inline (``mallopt`` with the same two
thresholds, 1 GiB, right after sizing their threads).

glibc's malloc serves a block of more than its mmap threshold (128 KiB, raised at run time up to 32 MiB) with a
fresh ``mmap`` and returns it with ``munmap`` when freed; and it gives the top of its heap back to the OS once more
than the trim threshold is free. A PPO update allocates and frees the same big tensors at every minibatch (the float
copy of 256 Atari frames is 29 MiB, the activations and their gradients several MiB each), so each minibatch paid
thousands of page faults to map, zero and unmap memory it had just released (blocks above 32 MiB, such as conv1's
unfolded input of a minibatch, are mapped afresh every time: about 24,000 faults for 100 MB). With both thresholds
raised, freed memory is reused without faults after the first few allocations (tests/test_malloc.py). The
measured gain is in docs/throughput.md.

The cost is memory: the heap keeps its high-water mark (a few hundred MiB for the default run) instead of shrinking
between minibatches. Other allocators (macOS, musl) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# mallopt parameters, from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

KEEP_BYTES = 1 << 30
"""freed memory the process may keep (trim threshold) and the size from which a block gets its own mmap"""


def keep_freed_memory(limit: int = KEEP_BYTES) -> bool:
    """Raise glibc's mmap and trim thresholds to ``limit`` bytes; True if glibc took both settings."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    # mmap threshold first: setting it also turns off glibc's dynamic adjustment of both thresholds
    return bool(libc.mallopt(M_MMAP_THRESHOLD, limit)) and bool(libc.mallopt(M_TRIM_THRESHOLD, limit))
