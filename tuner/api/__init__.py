"""The SpecTune service: REST API (one router per resource), web UI, embedded worker."""

from tuner.api._app import create_app
from tuner.api.settings import ServiceSettings, hash_token

__all__ = ["ServiceSettings", "create_app", "hash_token"]
