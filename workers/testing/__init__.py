"""Real local peers for tests, benchmarks and the demo (a rate-limited HTTP API, a dockerd)."""
