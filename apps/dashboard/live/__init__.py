"""Live updates of the dashboard over one multiplexed websocket (STYLE.md item 7).

``groups`` names the topics (``pool:cpu``, ``node:17``, ``job:3``), ``access`` says who may watch
which, ``consumer`` serves the socket and ``operator_commands`` the commands sent over it.
``broadcast`` sends a payload to a topic's subscribers; ``snapshots`` computes each topic's
payload; ``watched_topics`` refreshes the watched ones from the database; ``receivers`` turns what
lower apps announce (``apps.core.live``) into broadcasts.
"""
