"""The embedded mode, all in one place: ``python manage.py demo`` runs Loom in one process.

The top layer of the apps: the runtime (schedulers, agents and the in-process transport inside the
web server's event loop), the demo's live workload, the rollup thread that stands in for Celery
beat, and the ``demo`` command that wires them to the web app. Production runs the same classes as
separate processes over Redis; nothing below this app knows which mode it runs in.
"""
