"""Pieces every agent shares: the agent loop, host discovery, /proc scans."""
