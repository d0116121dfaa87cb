"""GPU agent: hosts GPU services with evict-on-execution (arl-tangram §5.3).

``cache.ServiceCache`` keeps each service's invariant copy in host memory and restores it onto the
allocated chunk before a request, evicting least-recently-used instances when device memory is
needed. Backends behind ``backend.ServiceBackend``: ``TorchService`` (a Hugging Face module from a
local checkpoint; CUDA when present, CPU stand-in devices otherwise) and ``SglangService``.
"""
