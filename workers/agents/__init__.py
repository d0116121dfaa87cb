"""Node agents: ``cpu`` (local and docker sandboxes) and ``api`` (rate-limited HTTP APIs).

They talk to the scheduler only through ``workers.transport`` and never import Django.
"""
