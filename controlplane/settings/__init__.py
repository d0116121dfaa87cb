"""Settings: ``base`` holds everything; ``dev``, ``prod`` and ``test`` adjust it."""
