"""The demo workload: small Python projects whose test suites are elastic reward actions.

Used by ``manage.py demo`` (the embedded control plane's live workload) and by
``python -m bench real_cpu``; both submit the same actions through the real API path.
"""
