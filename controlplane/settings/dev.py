"""The embedded demo and local development: DEBUG on, a secret key kept under var/."""

from controlplane.settings.base import *  # noqa: F403

DEBUG = True
