"""The ARTOS buffer data plane (artos §4.2, §4.4, §5): typed records, the central experience
buffer served over ZeroMQ, node-local cache buffers in shared memory with transfer triggers,
trigger message passing (direct, local queue, remote) and the workflow declaration API.

The trigger and sampler logic itself is pure and lives in ``workers.algorithms.artos``. No Django
and no database here.
"""
