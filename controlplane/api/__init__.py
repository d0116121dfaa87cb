"""API plumbing shared by every app: the error shape, pagination, permissions."""
