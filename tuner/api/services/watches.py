"""Watches through the API: register, list, show, delete. The scraping is the poller's
(``tuner.watch.WatchPoller``, started with the app); here only what is stored."""

from __future__ import annotations

from tuner.api.schemas import WatchCreate, WatchList, WatchPublic
from tuner.api.settings import ServiceSettings
from tuner.errors import InvalidInput
from tuner.storage import JobNotFound, Store, WatchInfo
from tuner.watch import check_url

__all__ = ["create", "delete", "get", "list_watches", "public"]


def public(w: WatchInfo) -> WatchPublic:
    return WatchPublic(
        id=w.id,
        job_id=w.job_id,
        url=w.url,
        interval_s=w.interval_s,
        created_at=w.created_at,
        checked_at=w.checked_at,
        verdict=w.verdict,
        error=w.last_error,
        last=w.last_result,
    )


def create(settings: ServiceSettings, store: Store, body: WatchCreate) -> WatchPublic:
    """InvalidInput naming ``url`` (not a base URL, or a host the service may not scrape) or
    ``job_id`` (an unknown job is a bad field here, not a missing resource: the path is
    /api/watches)."""
    try:
        url = check_url(body.url)
    except ValueError as e:
        raise InvalidInput.field(("body", "url"), str(e)) from None
    if not settings.watch_url_allowed(url):
        raise InvalidInput.field(
            ("body", "url"),
            f"url: {url!r} is not a host this service may scrape: loopback, or a host in "
            "SPECTUNE_WATCH_HOSTS",
            "not_allowed",
        )
    try:
        return public(store.create_watch(body.job_id, url, body.interval_s))
    except JobNotFound as e:
        raise InvalidInput.field(("body", "job_id"), f"job_id: {e}") from None


def list_watches(store: Store, job_id: int | None = None) -> WatchList:
    return WatchList(watches=[public(w) for w in store.watches(job_id)])


def get(store: Store, watch_id: int) -> WatchPublic:
    return public(store.watch(watch_id))


def delete(store: Store, watch_id: int) -> None:
    store.delete_watch(watch_id)
