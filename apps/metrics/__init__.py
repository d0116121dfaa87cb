"""Metrics: rollups that survive restarts (Celery beat) and the Prometheus ``/metrics`` endpoint."""
